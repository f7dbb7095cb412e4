/**
 * The `/cell.json` requests of one Lab, shared by every notebook view: one
 * request per cell run however many views show the notebook (two views of
 * one notebook each see the run's reply and ask for the same span), and at
 * most a few in flight at once (Run All over 300 cells would put 300 on the
 * dashboard server's threads together). A request past the cap waits its
 * turn, in the order asked. Answers are kept for the last few spans, so a
 * view that asks again later (shown again) is answered without a request.
 *
 * A hand-made queue and not Lumino's `Poll`: these are one-shot requests,
 * not a polled resource.
 */
import { FetchCellReport } from './cellReport';

/** Requests in flight at once, per Lab. Our choice: a few, as the issue asks. */
export const CELL_REQUESTS_IN_FLIGHT = 3;

/** Answers kept for a later ask of the same span. */
export const CELL_ANSWERS_KEPT = 64;

export class CellReportRequests {
  constructor(
    fetch: FetchCellReport,
    inFlight = CELL_REQUESTS_IN_FLIGHT,
    kept = CELL_ANSWERS_KEPT
  ) {
    this._fetch = fetch;
    this._cap = Math.max(1, inFlight);
    this._kept = Math.max(1, kept);
  }

  /** Requests sent to the server (tests). */
  get sent(): number {
    return this._sent;
  }

  /** Requests in flight now (tests). */
  get inFlight(): number {
    return this._running;
  }

  /** The report of a span: asked once, answered to every caller. */
  readonly fetch: FetchCellReport = (kernelId, start, end) => {
    const key = JSON.stringify([kernelId, start, end]);
    const known = this._answers.get(key);
    if (known) {
      // Most recently used last: the oldest is the one let go.
      this._answers.delete(key);
      this._answers.set(key, known);
      return known;
    }
    const answer = new Promise<unknown>((resolve, reject) => {
      this._queue.push(() => {
        this._sent++;
        this._running++;
        Promise.resolve()
          .then(() => this._fetch(kernelId, start, end))
          .then(resolve, error => {
            // A failure is not kept: the next run (or view) may ask again.
            this._answers.delete(key);
            reject(error);
          })
          .finally(() => {
            this._running--;
            this._next();
          });
      });
    });
    this._answers.set(key, answer);
    while (this._answers.size > this._kept) {
      this._answers.delete(this._answers.keys().next().value as string);
    }
    this._next();
    return answer;
  };

  private _next(): void {
    while (this._running < this._cap && this._queue.length) {
      this._queue.shift()!();
    }
  }

  private _fetch: FetchCellReport;
  private _cap: number;
  private _kept: number;
  private _sent = 0;
  private _running = 0;
  private _queue: Array<() => void> = [];
  private _answers = new Map<string, Promise<unknown>>();
}
