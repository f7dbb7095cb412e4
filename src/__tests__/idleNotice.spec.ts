import * as fs from 'fs';
import * as path from 'path';

import { StateDB } from '@jupyterlab/statedb';
import { JSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import { IGpuKernel, parseGlance, parseIdle } from '../glance/glance';
import { GlanceModel } from '../glance/glanceModel';
import { GlancePanel } from '../glance/glancePanel';
import { CULL_OFF, ICullPolicy, parseCulls } from '../idle/culls';
import {
  cullMessage,
  deadlineWords,
  noticeDue,
  noticeMessage,
  NOTICE_MAX_CHARS
} from '../idle/noticeWords';
import {
  DEFAULT_NOTICE_SETTINGS,
  idleWords,
  IIdleNoticeSettings,
  userThresholds
} from '../glance/idleRule';
import { IdleNotifier, INoticeAction } from '../idle/idleNotice';
import { NOTICE_INTERVAL_MS } from '../idle/noticePace';
import {
  INoticeMemory,
  emptyMemory,
  MEMORY_BOUND,
  NOTICE_STATE_ID,
  parseMemory
} from '../idle/noticeMemory';
import { settled } from './fakes';

const GIB = 2 ** 30;
const MIN = 60_000;

/** An `idle` object shaped as the server sends it (the contract of issue 28). */
function judgment(
  state: string,
  idleS: number | null,
  episode = 'k1:1000',
  heldBytes = 38 * GIB
): Record<string, unknown> {
  return {
    state,
    signal: 'per-process SM samples',
    held_bytes: heldBytes,
    gpus: ['GPU 1'],
    idle_s: idleS,
    episode,
    figures: { max_sm_pct: 0, samples: 120 },
    text: 'Untitled3.ipynb holds 38 GiB on GPU 1 and has done no GPU work for 42 min.'
  };
}

function kernelJson(
  id: string,
  path: string,
  idle: Record<string, unknown> | null
): Record<string, unknown> {
  return {
    kernel_id: id,
    path,
    memory_bytes: 38 * GIB,
    memory_known: true,
    devices: ['GPU 1'],
    idle
  };
}

function kernel(idle: Record<string, unknown> | null, id = 'k1'): IGpuKernel {
  return parseGlance({
    kernels: [kernelJson(id, 'work/Untitled3.ipynb', idle)]
  }).kernels[0];
}

const DEVICES = [
  {
    index: 1,
    label: 'GPU 1',
    kind: 'gpu',
    utilization_pct: 0,
    memory_used_bytes: 38 * GIB,
    memory_total_bytes: 80 * GIB
  }
];

const CULL_ON: ICullPolicy = {
  on: true,
  afterNoticeMinutes: 15,
  idleMinutes: 30,
  minHeldBytes: GIB,
  reportEveryS: 60,
  keepMinutes: 30
};

describe('parseIdle', () => {
  it('keeps the judgment, and an idle time only for an idle kernel', () => {
    expect(parseIdle(judgment('idle', 2520))).toEqual({
      state: 'idle',
      signal: 'per-process SM samples',
      held_bytes: 38 * GIB,
      gpus: ['GPU 1'],
      idle_s: 2520,
      episode: 'k1:1000',
      text: expect.stringContaining('no GPU work')
    });
    expect(parseIdle(judgment('busy', 2520))?.idle_s).toBeNull();
    expect(parseIdle(judgment('sleepy', 2520))).toBeNull();
    expect(parseIdle({ state: 'idle' })).toBeNull();
    expect(parseIdle(undefined)).toBeNull();
    expect(kernel(null).idle).toBeNull();
  });
});

describe('noticeDue', () => {
  const memory = emptyMemory();
  const on = DEFAULT_NOTICE_SETTINGS;
  const now = 1e12;

  it.each([
    ['an idle holder', judgment('idle', 42 * 60), on, CULL_OFF, 'user'],
    ['a busy kernel', judgment('busy', null), on, CULL_OFF, null],
    ['cannot tell', judgment('cannot_tell', null), on, CULL_OFF, null],
    ['cannot tell, cull on', judgment('cannot_tell', null), on, CULL_ON, null],
    ['idle too briefly', judgment('idle', 29 * 60), on, CULL_OFF, null],
    [
      'holding too little',
      judgment('idle', 42 * 60, 'k1:1000', 0.5 * GIB),
      on,
      CULL_OFF,
      null
    ],
    [
      'notices off',
      judgment('idle', 42 * 60),
      { ...on, enabled: false },
      CULL_OFF,
      null
    ],
    [
      'notices off, cull on',
      judgment('idle', 42 * 60),
      { ...on, enabled: false },
      CULL_ON,
      'cull'
    ],
    [
      'a lower own threshold',
      judgment('idle', 6 * 60),
      { ...on, idleMinutes: 5 },
      CULL_OFF,
      'user'
    ]
  ] as Array<
    [
      string,
      Record<string, unknown>,
      IIdleNoticeSettings,
      ICullPolicy,
      string | null
    ]
  >)('%s', (_, idle, settings, policy, expected) => {
    expect(noticeDue(kernel(idle), settings, policy, memory, now)).toBe(
      expected
    );
  });

  it('is due once per idle episode, not while snoozed, never after "Don\'t ask"', () => {
    const idle = kernel(judgment('idle', 42 * 60));
    const told: INoticeMemory = {
      ...emptyMemory(),
      noticed: { k1: 'k1:1000' }
    };
    expect(noticeDue(idle, on, CULL_OFF, told, now)).toBeNull();
    const again = kernel(judgment('idle', 42 * 60, 'k1:2000'));
    expect(noticeDue(again, on, CULL_OFF, told, now)).toBe('user');
    const snoozed = { ...emptyMemory(), snoozed: { k1: now + 1 } };
    expect(noticeDue(idle, on, CULL_OFF, snoozed, now)).toBeNull();
    expect(noticeDue(idle, on, CULL_OFF, snoozed, now + 2)).toBe('user');
    const declined = { ...emptyMemory(), dontAsk: ['work/Untitled3.ipynb'] };
    expect(noticeDue(idle, on, CULL_OFF, declined, now)).toBeNull();
    // The admin's cull is never unannounced.
    expect(noticeDue(idle, on, CULL_ON, declined, now)).toBe('cull');
  });
});

describe('the words', () => {
  it('says what the kernel holds, where, and for how long it did nothing', () => {
    const idle = kernel(judgment('idle', 42 * 60));
    expect(noticeMessage(idle, CULL_OFF)).toBe(
      'Untitled3.ipynb holds 38.0 GiB on GPU 1 and has done no GPU work for 42 min.'
    );
    const now = Date.UTC(2026, 11, 5, 9, 0);
    const cullAt = now + 15 * MIN;
    const warning = noticeMessage(idle, CULL_ON, cullAt, now);
    expect(warning).toBe(
      `Shut down at ${deadlineWords(cullAt, 15)} if it stays idle: ` +
        'Untitled3.ipynb holds 38.0 GiB on GPU 1, no GPU work for 42 min.'
    );
    // Not yet said by the server: a whole grace from now.
    expect(noticeMessage(idle, CULL_ON, null, now)).toBe(warning);
    expect(idleWords(idle, userThresholds(DEFAULT_NOTICE_SETTINGS))).toBe(
      'idle on GPU for 42 min'
    );
    expect(
      idleWords(
        kernel(judgment('busy', null)),
        userThresholds(DEFAULT_NOTICE_SETTINGS)
      )
    ).toBeNull();
    const [cull] = parseCulls({
      policy: { on: true, after_notice_minutes: 15 },
      culls: [
        {
          at: 5,
          kernel_id: 'k1',
          path: 'work/Untitled3.ipynb',
          held_bytes: 38 * GIB,
          gpus: ['GPU 1'],
          idle_s: 57 * 60,
          told_s_ago: 15 * 60
        }
      ]
    }).culls;
    const told = cullMessage(cull);
    expect(told).toBe(
      'GPU idle cull shut down the kernel of Untitled3.ipynb: 38.0 GiB on GPU 1, ' +
        'no GPU work for 57 min, told 15 min before.'
    );
    expect(told.length).toBeLessThanOrEqual(NOTICE_MAX_CHARS);
  });

  it("keeps the deadline readable within JupyterLab's cut, whatever the name and GPUs", () => {
    const now = Date.UTC(2026, 11, 5, 9, 0);
    const cullAt = now + 15 * MIN;
    const deadline = `Shut down at ${deadlineWords(cullAt, 15)} if it stays idle: `;
    const gpus = ['GPU 0', 'GPU 1', 'GPU 2', 'GPU 3'];
    const many = (path: string): IGpuKernel =>
      parseGlance({
        kernels: [
          {
            ...kernelJson('k1', path, judgment('idle', 42 * 60)),
            devices: gpus,
            idle: { ...judgment('idle', 42 * 60), gpus }
          }
        ]
      }).kernels[0];
    const realistic =
      'projects/llm/finetune_llama3_8b_lora_experiment_v2.ipynb';
    for (const path of [
      realistic,
      `work/${'very_long_name_'.repeat(12)}.ipynb`
    ]) {
      const message = noticeMessage(many(path), CULL_ON, cullAt, now);
      expect(message.length).toBeLessThanOrEqual(NOTICE_MAX_CHARS);
      expect(message.startsWith(deadline)).toBe(true);
      expect(message).toContain('no GPU work for 42 min.');
    }
    // The realistic name is kept whole; the GPUs are counted instead.
    expect(noticeMessage(many(realistic), CULL_ON, cullAt, now)).toBe(
      `${deadline}finetune_llama3_8b_lora_experiment_v2.ipynb holds 38.0 GiB on ` +
        '4 GPUs, no GPU work for 42 min.'
    );
  });

  it('reads odd cull answers and memories as nothing', () => {
    expect(parseCulls('junk')).toEqual({
      policy: CULL_OFF,
      warnings: [],
      culls: []
    });
    expect(
      parseCulls({ warnings: [{ kernel_id: 'k1' }, 'x', null] }).warnings
    ).toEqual([]);
    expect(
      parseCulls({ policy: { on: true, after_notice_minutes: 0 } }).policy
    ).toEqual(CULL_OFF);
    expect(
      parseMemory({ noticed: { k1: 3 }, snoozed: { k1: 'x' }, dontAsk: [1] })
    ).toEqual(emptyMemory());
    const many: Record<string, string> = {};
    for (let i = 0; i < MEMORY_BOUND + 50; i++) {
      many[`k${i}`] = 'e';
    }
    const kept = parseMemory({ noticed: many }).noticed;
    expect(Object.keys(kept)).toHaveLength(MEMORY_BOUND);
    expect(kept[`k${MEMORY_BOUND + 49}`]).toBe('e'); // the newest stay
  });
});

/** A notifier over a real glance model and a real (in-memory) state database. */
class Harness {
  constructor(
    kernels: Array<Record<string, unknown>>,
    options: {
      state?: StateDB;
      settings?: Partial<IIdleNoticeSettings>;
      culls?: unknown;
      local?: string[];
    } = {}
  ) {
    this.kernels = kernels;
    this.state = options.state ?? new StateDB();
    this.culls = options.culls ?? { policy: { on: false }, culls: [] };
    const local = options.local ?? ['k1', 'k2'];
    this.model = new GlanceModel({
      fetch: () => Promise.resolve({ devices: DEVICES, kernels: this.kernels }),
      autoStart: false,
      standby: 'never'
    });
    this.notifier = new IdleNotifier({
      model: this.model,
      notify: (message, type, actions) => {
        this.shown.push({ message, type, actions });
        return `n${this.shown.length}`;
      },
      reword: (id, message, type, actions) => {
        this.reworded.push(id);
        if (this.undrawn.has(id)) {
          return; // JupyterLab drops it: the toast keeps its first words
        }
        const index = Number(id.slice(1)) - 1;
        this.shown[index] = { message, type, actions };
      },
      dismiss: id => this.dismissed.push(id),
      shutdownKernel: async id => {
        this.shutDown.push(id);
        this.kernels = this.kernels.filter(k => k.kernel_id !== id);
      },
      openPath: path => this.opened.push(path),
      isLocalKernel: id => local.includes(id),
      postNotice: async (id, episode) => {
        this.posted.push([id, episode]);
        return this.cullAt;
      },
      postKeep: async id => {
        this.kept.push(id);
        return this.keptUntil;
      },
      fetchCulls: async () => {
        if (this.culls instanceof Error) {
          throw this.culls;
        }
        return this.culls;
      },
      store: this.state,
      now: () => this.clock,
      autoStart: false
    });
    this.notifier.settings = {
      ...DEFAULT_NOTICE_SETTINGS,
      ...options.settings
    };
  }

  async poll(): Promise<void> {
    await this.notifier.ready;
    await settled(this.model.refresh());
  }

  /**
   * `minutes` later: the server's idle time of work/a.ipynb (k1, 42 min at
   * first) has grown as much, in the same episode.
   */
  later(minutes: number): void {
    this.clock += minutes * MIN;
    this.idleMinutes += minutes;
    this.kernels = [
      kernelJson('k1', 'work/a.ipynb', judgment('idle', this.idleMinutes * 60))
    ];
  }

  /** Click the action labelled `label` of the last notification. */
  click(label: string): void {
    const action = this.shown[this.shown.length - 1].actions.find(
      a => a.label === label
    );
    expect(action).toBeDefined();
    action!.callback(new MouseEvent('click'));
  }

  dispose(): void {
    this.notifier.dispose();
    this.model.dispose();
  }

  kernels: Array<Record<string, unknown>>;
  state: StateDB;
  culls: unknown;
  model: GlanceModel;
  notifier: IdleNotifier;
  clock = 1e12;
  idleMinutes = 42;
  shown: Array<{ message: string; type: string; actions: INoticeAction[] }> =
    [];
  dismissed: string[] = [];
  shutDown: string[] = [];
  opened: string[] = [];
  posted: Array<[string, string]> = [];
  kept: string[] = [];
  reworded: string[] = [];
  /** Notifications JupyterLab has not drawn yet: a reword of one is lost. */
  undrawn = new Set<string>();
  cullAt: number | null = null;
  keptUntil: number | null = null;
}

const IDLE = kernelJson('k1', 'work/a.ipynb', judgment('idle', 42 * 60));

describe('IdleNotifier', () => {
  it('tells an idle holder once, with its figures and four actions, and tells the server', async () => {
    const h = new Harness([IDLE]);
    await h.poll();
    await h.poll();
    expect(h.shown).toHaveLength(1);
    expect(h.shown[0].message).toBe(
      'a.ipynb holds 38.0 GiB on GPU 1 and has done no GPU work for 42 min.'
    );
    expect(h.shown[0].type).toBe('info');
    expect(h.shown[0].actions.map(a => a.label)).toEqual([
      'Shut down kernel',
      'Open notebook',
      'Not now',
      "Don't ask for this notebook"
    ]);
    expect(h.posted).toEqual([['k1', 'k1:1000']]);
    // A new idle episode (the kernel worked in between) is told again.
    h.kernels = [
      kernelJson('k1', 'work/a.ipynb', judgment('idle', 31 * 60, 'k1:9000'))
    ];
    await h.poll();
    expect(h.shown).toHaveLength(2);
    expect(h.dismissed).toEqual(['n1']); // the out-of-date one goes
    // It runs a cell: the notice is over, and goes from the screen.
    h.kernels = [
      kernelJson('k1', 'work/a.ipynb', judgment('busy', null, 'k1:busy'))
    ];
    await h.poll();
    expect(h.dismissed).toEqual(['n1', 'n2']);
    expect(h.notifier.shown.size).toBe(0);
    h.dispose();
  });

  it('says nothing for a busy kernel, cannot-tell, or a kernel another server runs', async () => {
    const h = new Harness(
      [
        kernelJson('k1', 'busy.ipynb', judgment('busy', null)),
        kernelJson('k2', 'shared.ipynb', judgment('cannot_tell', null, 'k2:1')),
        kernelJson('k3', 'elsewhere.ipynb', judgment('idle', 3600, 'k3:1'))
      ],
      { culls: { policy: { on: true, after_notice_minutes: 1 }, culls: [] } }
    );
    await h.poll();
    await h.notifier.readCulls();
    await h.poll();
    expect(h.notifier.policy.on).toBe(true);
    expect(h.shown).toEqual([]);
    expect(h.posted).toEqual([]);
    h.dispose();
  });

  it('shuts the kernel down, and its row goes from the reading', async () => {
    const h = new Harness([IDLE]);
    await h.poll();
    h.click('Shut down kernel');
    await settled(Promise.resolve());
    await h.poll();
    expect(h.shutDown).toEqual(['k1']);
    expect(h.model.glance?.kernels).toEqual([]);
    h.dispose();
  });

  it('opens the notebook', async () => {
    const h = new Harness([IDLE]);
    await h.poll();
    h.click('Open notebook');
    expect(h.opened).toEqual(['work/a.ipynb']);
    h.dispose();
  });

  it('"Not now" is quiet for the snooze time, then tells once more', async () => {
    const h = new Harness([IDLE], { settings: { snoozeMinutes: 10 } });
    await h.poll();
    h.click('Not now');
    h.later(9);
    await h.poll();
    expect(h.shown).toHaveLength(1);
    h.later(11);
    await h.poll();
    await h.poll();
    expect(h.shown).toHaveLength(2);
    expect(h.shown[1].message).toContain('for 62 min');
    h.dispose();
  });

  it('remembers "Don\'t ask" and what was told across a reload', async () => {
    const state = new StateDB();
    const first = new Harness(
      [IDLE, kernelJson('k2', 'work/b.ipynb', judgment('idle', 3600, 'k2:1'))],
      { state }
    );
    await first.poll();
    expect(first.shown).toHaveLength(2);
    first.click("Don't ask for this notebook"); // b.ipynb, the last one
    await settled(Promise.resolve());
    first.dispose();
    const saved = (await state.fetch(
      NOTICE_STATE_ID
    )) as unknown as INoticeMemory;
    expect(saved.dontAsk).toEqual(['work/b.ipynb']);

    // The page is reloaded: b.ipynb's next episode is not asked about, and
    // a.ipynb's episode already told is not told again.
    const second = new Harness(
      [IDLE, kernelJson('k2', 'work/b.ipynb', judgment('idle', 3600, 'k2:2'))],
      { state }
    );
    await second.poll();
    expect(second.shown).toEqual([]);
    second.dispose();
  });

  it('with the cull on, warns whatever the user set, and tells of a cull once', async () => {
    const culls = {
      policy: {
        on: true,
        after_notice_minutes: 15,
        idle_minutes: 30,
        min_held_bytes: GIB
      },
      culls: [] as unknown[]
    };
    const h = new Harness([IDLE], { settings: { enabled: false }, culls });
    await h.poll();
    await h.notifier.readCulls();
    await h.poll();
    expect(h.shown.map(s => [s.type, s.message])).toEqual([
      [
        'warning',
        `Shut down at ${deadlineWords(h.clock + 15 * MIN, 15)} if it stays ` +
          'idle: a.ipynb holds 38.0 GiB on GPU 1, no GPU work for 42 min.'
      ]
    ]);
    expect(h.shown[0].actions.map(a => a.label)).toEqual([
      'Shut down kernel',
      'Open notebook',
      'Keep this kernel'
    ]);
    expect(h.posted).toEqual([['k1', 'k1:1000']]);
    culls.culls = [
      {
        at: 1700000000,
        kernel_id: 'k1',
        path: 'work/a.ipynb',
        held_bytes: 38 * GIB,
        gpus: ['GPU 1'],
        idle_s: 57 * 60,
        told_s_ago: 15 * 60
      }
    ];
    h.kernels = [];
    await h.poll();
    await h.notifier.readCulls();
    // The server no longer holds the warning: it goes from the screen.
    expect(h.dismissed).toEqual(['n1']);
    await h.notifier.readCulls();
    expect(h.shown.map(s => s.message).slice(1)).toEqual([
      'GPU idle cull shut down the kernel of a.ipynb: 38.0 GiB on GPU 1, ' +
        'no GPU work for 57 min, told 15 min before.'
    ]);
    h.dispose();
  });

  it('keeps what it knew of the cull when the server does not answer', async () => {
    const h = new Harness([IDLE], {
      culls: { policy: { on: true, after_notice_minutes: 15 }, culls: [] }
    });
    await h.notifier.readCulls();
    expect(h.notifier.policy.on).toBe(true);
    h.culls = new Error('no answer');
    await h.notifier.readCulls();
    expect(h.notifier.policy.on).toBe(true);
    h.dispose();
  });

  it('reads the glance only while a notice may be due', async () => {
    const h = new Harness([IDLE], { settings: { enabled: false } });
    await h.notifier.ready;
    await h.notifier.readCulls();
    expect(h.model.poller.running).toBe(false);
    h.notifier.settings = DEFAULT_NOTICE_SETTINGS;
    expect(h.model.poller.running).toBe(true);
    h.dispose();
  });

  it('reads the glance only as often as its thresholds need', async () => {
    const h = new Harness([IDLE]);
    await h.notifier.ready;
    // Idle 30 min, snooze 60 min: once a minute, not at the 2 s refresh rate.
    expect(h.model.interval).toBe(2000);
    expect(h.model.currentInterval).toBe(NOTICE_INTERVAL_MS);
    // Shorter thresholds: a tenth of the shortest, never below the refresh rate.
    h.notifier.settings = { ...DEFAULT_NOTICE_SETTINGS, idleMinutes: 5 };
    expect(h.model.currentInterval).toBe(30_000);
    h.notifier.settings = { ...DEFAULT_NOTICE_SETTINGS, snoozeMinutes: 1 };
    expect(h.model.currentInterval).toBe(6000);
    h.notifier.settings = { ...DEFAULT_NOTICE_SETTINGS, idleMinutes: 0 };
    expect(h.model.currentInterval).toBe(2000);
    // Notices off, the admin's cull on: the cull's idle time counts.
    h.notifier.settings = { ...DEFAULT_NOTICE_SETTINGS, enabled: false };
    h.culls = {
      policy: { on: true, after_notice_minutes: 15, idle_minutes: 2 },
      culls: []
    };
    await h.notifier.readCulls();
    expect(h.model.currentInterval).toBe(12_000);
    // A view that uses it too reads at the refresh rate.
    h.model.use('sidebar', true);
    expect(h.model.currentInterval).toBe(2000);
    h.model.use('sidebar', false);
    expect(h.model.currentInterval).toBe(12_000);
    h.dispose();
  });
});

/** The readings both sides are driven through (tests/test_idle_cull.py too). */
const SEQUENCES = JSON.parse(
  fs.readFileSync(
    path.join(__dirname, '../../tests/support/idle_warning_sequences.json'),
    'utf8'
  )
) as {
  policy: { after_notice_s: number; idle_s: number; min_held_bytes: number };
  sequences: Array<{
    name: string;
    server_only?: boolean;
    steps: Array<{
      t: number;
      idle: Record<string, unknown> | null;
      action?: string;
      warning: boolean;
      culled: boolean;
    }>;
  }>;
};

describe('the warning follows the server through the shared readings', () => {
  const policy = {
    on: true,
    after_notice_minutes: SEQUENCES.policy.after_notice_s / 60,
    idle_minutes: SEQUENCES.policy.idle_s / 60,
    min_held_bytes: SEQUENCES.policy.min_held_bytes,
    report_every_s: 10,
    keep_minutes:
      Math.max(SEQUENCES.policy.idle_s, SEQUENCES.policy.after_notice_s) / 60
  };
  it.each(
    SEQUENCES.sequences
      .filter(s => !s.server_only)
      .map(s => [s.name, s.steps] as const)
  )('%s', async (_, steps) => {
    const start = 1e12;
    const culls = { policy, warnings: [] as unknown[], culls: [] as unknown[] };
    const h = new Harness([], { settings: { enabled: false }, culls });
    h.keptUntil = start / 1000 + policy.keep_minutes * 60 + 5;
    let episode: string | null = null;
    for (const step of steps) {
      h.clock = start + step.t * 1000;
      h.kernels = step.culled
        ? []
        : [
            kernelJson(
              'k1',
              'x.ipynb',
              step.idle && { ...judgment('idle', null), ...step.idle }
            )
          ];
      if (step.action === 'keep') {
        h.click('Keep this kernel');
        await settled(Promise.resolve());
      }
      // What the server holds armed at this step (test_idle_cull.py checks
      // that it does), and the cull where it happened.
      // (the episode of the idle reading it was shown for).
      const idleEpisode =
        step.idle?.state === 'idle' ? (step.idle.episode as string) : null;
      const armed: string | null = step.warning
        ? (idleEpisode ?? episode)
        : null;
      episode = armed ?? episode;
      culls.warnings = armed
        ? [{ kernel_id: 'k1', episode: armed, cull_at: start / 1000 + 60 }]
        : [];
      culls.culls = step.culled
        ? [{ at: start / 1000 + step.t, kernel_id: 'k1', path: 'x.ipynb' }]
        : [];
      await h.poll();
      await h.notifier.readCulls();
      await settled(Promise.resolve());
      await h.notifier.readCulls();
      const warned = [...h.notifier.shown.values()].map(n => n.episode);
      expect([step.t, warned]).toEqual([step.t, armed ? [armed] : []]);
    }
    h.dispose();
  });

  it('reports each warning on screen at every read, so the server knows it is seen', async () => {
    const culls = {
      policy,
      warnings: [{ kernel_id: 'k1', episode: 'k1:1000', cull_at: 1e9 + 60 }],
      culls: []
    };
    const h = new Harness([IDLE], { settings: { enabled: false }, culls });
    await h.notifier.readCulls();
    await h.poll();
    expect(h.shown).toHaveLength(1);
    await h.notifier.readCulls();
    await h.notifier.readCulls();
    expect(h.posted).toEqual([
      ['k1', 'k1:1000'],
      ['k1', 'k1:1000'],
      ['k1', 'k1:1000']
    ]);
    expect(h.shown).toHaveLength(1);
    // The server moves the deadline (its grace restarted): the same
    // notification says the new one, without leaving the screen.
    h.cullAt = h.clock / 1000 + 5 * 60;
    await h.notifier.readCulls();
    await settled(Promise.resolve());
    expect(h.reworded).toEqual(['n1']);
    expect(h.dismissed).toEqual([]);
    expect(h.shown[0].message).toContain(
      `Shut down at ${deadlineWords(h.cullAt * 1000, 1)} `
    );
    h.dispose();
  });

  it('says a moved deadline again at the next report, for a toast drawn after the first', async () => {
    const culls = { policy, warnings: [] as unknown[], culls: [] };
    const h = new Harness([IDLE], { settings: { enabled: false }, culls });
    await h.notifier.readCulls();
    await h.poll();
    expect(h.shown).toHaveLength(1); // a whole grace from now, until told
    // The server's deadline differs; its answer comes before the toast is
    // drawn, and that reword is lost.
    h.cullAt = h.clock / 1000 + 30;
    culls.warnings = [
      { kernel_id: 'k1', episode: 'k1:1000', cull_at: h.cullAt }
    ];
    h.undrawn.add('n1');
    await h.notifier.readCulls();
    await settled(Promise.resolve());
    expect(h.reworded).toEqual(['n1']);
    const said = `Shut down at ${deadlineWords(h.cullAt * 1000, 1)} `;
    expect(h.shown[0].message).not.toContain(said);
    h.undrawn.clear();
    await h.notifier.readCulls();
    await settled(Promise.resolve());
    expect(h.reworded).toEqual(['n1', 'n1']);
    expect(h.shown[0].message).toContain(said);
    // Said twice, and then no more while the deadline stands.
    await h.notifier.readCulls();
    await settled(Promise.resolve());
    expect(h.reworded).toEqual(['n1', 'n1']);
    expect(h.dismissed).toEqual([]);
    h.dispose();
  });

  it('a reload shows the warning the server holds armed again, told before or not', async () => {
    const state = new StateDB();
    const told: INoticeMemory = {
      ...emptyMemory(),
      noticed: { k1: 'k1:1000' }
    };
    await state.save(NOTICE_STATE_ID, told as unknown as JSONObject);
    const culls = {
      policy,
      warnings: [{ kernel_id: 'k1', episode: 'k1:1000', cull_at: 1e9 + 60 }],
      culls: []
    };
    const h = new Harness([IDLE], {
      state,
      settings: { enabled: false },
      culls
    });
    await h.poll();
    expect(h.shown).toEqual([]); // told before this page: not due by itself
    await h.notifier.readCulls();
    expect(h.shown).toHaveLength(1);
    expect(h.shown[0].message).toContain(
      `Shut down at ${deadlineWords((1e9 + 60) * 1000, 1)} `
    );
    h.dispose();
  });

  it('"Keep this kernel" holds the warning back as long as the server keeps the kernel', async () => {
    const culls = { policy, warnings: [] as unknown[], culls: [] };
    const h = new Harness([IDLE], { settings: { enabled: false }, culls });
    await h.notifier.readCulls();
    await h.poll();
    expect(h.shown).toHaveLength(1);
    h.keptUntil = h.clock / 1000 + 30 * 60;
    h.click('Keep this kernel');
    await settled(Promise.resolve());
    expect(h.kept).toEqual(['k1']);
    h.later(29);
    await h.poll();
    await h.notifier.readCulls();
    expect(h.shown).toHaveLength(1); // no second notice while kept
    h.later(2);
    await h.poll();
    expect(h.shown).toHaveLength(2); // the keep is over: warned anew
    h.dispose();
  });
});

describe('"Your GPU kernels"', () => {
  it('says "idle on GPU for 42 min" beside an idle holder only', async () => {
    const model = new GlanceModel({
      fetch: () =>
        Promise.resolve({
          devices: DEVICES,
          kernels: [
            kernelJson('k1', 'a.ipynb', judgment('idle', 42 * 60)),
            kernelJson('k2', 'b.ipynb', judgment('busy', null, 'k2:1')),
            kernelJson('k3', 'c.ipynb', judgment('idle', 5 * 60, 'k3:1'))
          ]
        }),
      autoStart: false
    });
    const panel = new GlancePanel({
      model,
      confirm: () => Promise.resolve(true),
      shutdownKernel: () => Promise.resolve()
    });
    Widget.attach(panel, document.body);
    await settled(model.refresh());
    const idle = (id: string): HTMLElement =>
      panel.node.querySelector(
        `[data-kernel-id="${id}"] .nvdashboard-kernel-idle`
      ) as HTMLElement;
    expect(idle('k1').hidden).toBe(false);
    expect(idle('k1').textContent).toBe('idle on GPU for 42 min');
    expect(idle('k1').title).toContain('no GPU work');
    expect(idle('k2').hidden).toBe(true);
    expect(idle('k3').hidden).toBe(true); // under the 30 minutes
    panel.idleThresholds = userThresholds({
      ...DEFAULT_NOTICE_SETTINGS,
      idleMinutes: 5
    });
    await settled(Promise.resolve());
    expect(idle('k3').textContent).toBe('idle on GPU for 5 min');
    panel.dispose();
    model.dispose();
  });
});
