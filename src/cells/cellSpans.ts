/**
 * A cell's span on the kernel's own clock, read from the kernel messages
 * JupyterLab already receives: the start is the `execute_input` message's
 * header date (IOPub), the end the `execute_reply`'s (shell), exactly the
 * two times JupyterLab's `recordTiming` keeps. Nothing is injected into the
 * kernel (any kernel language works), and the browser's clock is never
 * read: the server and the kernel may run where the clock differs.
 *
 * Why here and not in the server extension: the execute_reply travels on
 * the shell channel only to the client that sent the request, and the
 * request names its cell (`metadata.cellId`, which JupyterLab sets), so the
 * frontend is the one place that sees both ends of the span and which cell
 * they belong to, with no guess between a message and a cell.
 */
import { ISignal, Signal } from '@lumino/signaling';

/** One executed cell's span, as the kernel stamped it. */
export interface ICellSpan {
  kernelId: string;
  /** The cell's id in the notebook model (`cell.model.id`). */
  cellId: string;
  /** The execution count the kernel gave it; null when it did not say. */
  count: number | null;
  /** The `execute_input` header date: ISO 8601 with its zone, as sent. */
  start: string;
  /** The `execute_reply` header date. */
  end: string;
  /**
   * The cell was sent to run again before this run ended (queued twice, or
   * Run All over a cell already queued): this run's footer would stand
   * under the newer run, which is still to come. Absent otherwise.
   */
  superseded?: true;
}

/** A cell the kernel runs now: its `execute_input`, before its reply. */
export interface IRunningCell {
  kernelId: string;
  cellId: string;
  count: number | null;
  /** The `execute_input` header date: ISO 8601 with its zone, as sent. */
  start: string;
}

/** The part of a kernel message this reads (`KernelMessage.IMessage`). */
export interface IKernelMessageLike {
  header: { msg_id: string; msg_type: string; date?: string };
  parent_header: { msg_id?: string } | Record<string, never>;
  metadata: Record<string, unknown>;
  content: Record<string, unknown>;
  channel?: string;
}

/** The part of a kernel connection this reads (`Kernel.IKernelConnection`). */
export interface IKernelLike {
  readonly id: string;
  readonly anyMessage: ISignal<
    unknown,
    { msg: IKernelMessageLike; direction: 'send' | 'recv' }
  >;
}

/** How many requests without a reply are remembered (a kernel that died). */
const PENDING_BOUND = 256;

interface IPending {
  cellId: string;
  /** The order it was sent in. */
  serial: number;
  count: number | null;
  start: string | null;
}

/**
 * Watches one kernel connection: `started` when a cell's request goes out
 * (its old footer is out of date), `ended` with the span when its reply
 * comes. A reply without an `execute_input` before it (the kernel did not
 * run the code, e.g. after an error earlier in a queue) has no span.
 */
export class CellSpanWatcher {
  constructor(kernel: IKernelLike) {
    this._kernel = kernel;
    kernel.anyMessage.connect(this._onMessage, this);
  }

  get kernelId(): string {
    return this._kernel.id;
  }

  /** A cell was sent to run (its id). */
  get started(): ISignal<this, string> {
    return this._started;
  }

  /** The kernel started running a cell (its `execute_input`). */
  get running(): ISignal<this, IRunningCell> {
    return this._running;
  }

  /** A cell ran: its span on the kernel's clock. */
  get ended(): ISignal<this, ICellSpan> {
    return this._ended;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._kernel.anyMessage.disconnect(this._onMessage, this);
    this._pending.clear();
    Signal.clearData(this);
  }

  private _onMessage(
    _: unknown,
    args: { msg: IKernelMessageLike; direction: 'send' | 'recv' }
  ): void {
    const { msg, direction } = args;
    const type = msg.header.msg_type;
    if (direction === 'send') {
      const cellId = msg.metadata?.cellId;
      if (type === 'execute_request' && typeof cellId === 'string') {
        this._pending.set(msg.header.msg_id, {
          cellId,
          serial: ++this._sent,
          count: null,
          start: null
        });
        if (this._pending.size > PENDING_BOUND) {
          this._pending.delete(this._pending.keys().next().value as string);
        }
        this._started.emit(cellId);
      }
      return;
    }
    const parent = (msg.parent_header as { msg_id?: string }).msg_id;
    const pending =
      parent === undefined ? undefined : this._pending.get(parent);
    if (!pending || parent === undefined) {
      return;
    }
    if (type === 'execute_input') {
      pending.start =
        typeof msg.header.date === 'string' ? msg.header.date : null;
      const count = msg.content.execution_count;
      pending.count = typeof count === 'number' ? count : null;
      if (pending.start !== null) {
        this._running.emit({
          kernelId: this._kernel.id,
          cellId: pending.cellId,
          count: pending.count,
          start: pending.start
        });
      }
    } else if (type === 'execute_reply') {
      this._pending.delete(parent);
      const end = msg.header.date;
      if (pending.start === null || typeof end !== 'string') {
        return;
      }
      const count = msg.content.execution_count;
      // A request for the same cell, sent after this one, still pending (one
      // sent before it and never answered, as after a kernel restart, is not).
      const superseded = Array.from(this._pending.values()).some(
        other =>
          other.cellId === pending.cellId && other.serial > pending.serial
      );
      this._ended.emit({
        kernelId: this._kernel.id,
        cellId: pending.cellId,
        count: typeof count === 'number' ? count : pending.count,
        start: pending.start,
        end,
        ...(superseded ? { superseded: true as const } : {})
      });
    }
  }

  private _kernel: IKernelLike;
  private _disposed = false;
  private _pending = new Map<string, IPending>();
  private _sent = 0;
  private _started = new Signal<this, string>(this);
  private _running = new Signal<this, IRunningCell>(this);
  private _ended = new Signal<this, ICellSpan>(this);
}
