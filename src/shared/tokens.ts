/**
 * Constants and types shared by the nvdashboard frontend.
 *
 * This module must stay free of side effects and of runtime imports, so any
 * other module (and every test) can import it cheaply.
 */
import type { ISignal } from '@lumino/signaling';

/** The one command that opens (or re-activates) a dashboard tab. */
export const COMMAND_OPEN = 'nvdashboard:open';

/** The timeline a cell's footer opens on the cell's span. */
export const ACTIVITY_ROUTE = '/GPU-Activity';

/** The name the Bokeh server is registered under in jupyter-server-proxy. */
export const PROXY_NAME = 'nvdashboard';

/**
 * Where the Jupyter server extension serves the idle notice's routes
 * (`notices`, `culls`), under Jupyter's base URL (jupyter_extension.py).
 */
export const IDLE_API = 'nvdashboard-idle';

/** Namespace of the widget tracker used for layout restoration. */
export const TRACKER_NAMESPACE = 'nvdashboard';

/** DOM id of the sidebar panel (also its layout-restorer key). */
export const SIDEBAR_ID = 'nvdashboard-sidebar';

/** Class of the sidebar's footer, which names the server's package version. */
export const SIDEBAR_FOOTER_CLASS = 'nvdashboard-sidebar-footer';

/** Prefix of the stable per-route main-area widget ids. */
export const WIDGET_ID_PREFIX = 'nvdashboard-';

/** CSS class on every dashboard main-area widget. */
export const WIDGET_CLASS = 'nvdashboard-widget';

/** CSS class on every dashboard button in the sidebar. */
export const BUTTON_CLASS = 'nvdashboard-button';

/** CSS class on every status detail line in the sidebar. */
export const STATUS_DETAIL_CLASS = 'nvdashboard-status-detail';

/** CSS class on a status line that describes a MIG device (indented). */
export const STATUS_MIG_CLASS = 'nvdashboard-status-mig';

/**
 * The dashboard index served at `{base}nvdashboard/index.json`:
 * route (e.g. `/GPU-Utilization`) → human title (e.g. `GPU Utilization`).
 */
export type DashboardIndex = Record<string, string>;

/** The colour scheme a dashboard page is asked to render with. */
export type DashboardTheme = 'dark' | 'light';

/** Why NVML is (or is not) usable: exactly the states the server sends. */
export type NvmlState =
  | 'uninitialized'
  | 'ok'
  | 'library_not_found'
  | 'driver_not_loaded'
  | 'no_permission'
  | 'no_devices'
  | 'error';

/** A physical GPU, or a MIG device (a GPU instance carved out of one). */
export type DeviceKind = 'gpu' | 'mig';

/** How a MIG device is carved out of its GPU; `null` means not reported. */
export interface IMigInfo {
  gpu_instance_id: number | null;
  compute_instance_id: number | null;
  gpu_slices: number | null;
  compute_slices: number | null;
  memory_slices: number | null;
  multiprocessors: number | null;
}

/**
 * One device as listed in `info.json`: physical GPUs and MIG devices in one
 * list, each MIG device after its parent. Fields an older server does not
 * send are filled with neutral values by `parseInfo`.
 */
export interface IDeviceInfo {
  /** Position in `devices`; `parent` refers to it. */
  index: number;
  /** nvidia-smi-style identity, e.g. `GPU 2` or `GPU 0 · MIG 1`. */
  label: string;
  kind: DeviceKind;
  /** `index` of the parent GPU of a MIG device, else null. */
  parent: number | null;
  nvml_index: number | null;
  /** Position as CUDA sees it in the server process; null when CUDA does not. */
  cuda_index: number | null;
  /** False when the server did not send `cuda_index` at all (older server). */
  cuda_index_known: boolean;
  name: string;
  uuid: string;
  memory_total_bytes: number | null;
  mig_enabled: boolean;
  mig: IMigInfo | null;
  /** e.g. `none`, or empty when not reported. */
  virtualization: string;
  /** The device stopped answering; its readings are gone. */
  lost: boolean;
  /** Metric name → one-line reason it is not available on this device. */
  unavailable: Record<string, string>;
  [key: string]: unknown;
}

/** The server status served at `{base}nvdashboard/info.json`. */
export interface IServerInfo {
  version: string;
  /** A known state, or `unknown` for a state this frontend does not know. */
  nvml_state: NvmlState | 'unknown';
  /** The state string exactly as the server sent it. */
  nvml_state_reported: string;
  nvml_message: string;
  simulated: boolean;
  /** The simulated hardware profile (e.g. `a100-mig`), or null. */
  simulated_profile: string | null;
  gpu_count: number;
  devices: IDeviceInfo[];
  /**
   * True until the server's first GPU read is done: until then its index
   * lists only the machine dashboards.
   */
  reading_gpus: boolean;
  interval_s: number;
  history_s: number;
}

/** A span of time a timeline page is opened on (epoch seconds). */
export interface ITimeRange {
  start_s: number;
  end_s: number;
  /** What the page labels the span with (e.g. `cell [12]`); '' for its times. */
  label: string;
  /**
   * The UUIDs of the GPUs to show alone (a cell's, from `/cell.json`);
   * absent or empty: every GPU.
   */
  gpus?: string[];
}

/** Arguments of the `nvdashboard:open` command. */
export interface IOpenArgs {
  /** Route as in the index, e.g. `/GPU-Utilization` (leading slash optional). */
  route: string;
  /** Tab title, e.g. `GPU Utilization`. */
  label: string;
  /** Show this span, marked (a timeline page); absent: follow now. */
  range?: ITimeRange;
}

/** Where the sidebar gets its data; injectable so tests can fake the server. */
export interface IDashboardFetcher {
  /** Resolve with the parsed JSON body of `index.json`, or reject. */
  fetchIndex(): Promise<unknown>;
  /** Resolve with the parsed JSON body of `info.json`, or reject. */
  fetchInfo(): Promise<unknown>;
}

/**
 * Whether something the sidebar shows is live now (the glance's meters), and
 * when that may have changed: a slow `info.json` is reported only when
 * nothing on the sidebar is live.
 */
export interface ILiveReadings {
  readonly live: boolean;
  readonly changed: ISignal<unknown, unknown>;
}

/** postMessage type /GPU-Processes sends to open a notebook (apps/processes.py). */
export const OPEN_NOTEBOOK_MESSAGE = 'nvdashboard:open-notebook';

/** postMessage type a dashboard page listens for (apps/live_client.js). */
export const VISIBILITY_MESSAGE = 'nvdashboard:visibility';

/** postMessage type a dashboard page sends to ask whether its tab is shown. */
export const VISIBILITY_REQUEST_MESSAGE = 'nvdashboard:visibility-request';
