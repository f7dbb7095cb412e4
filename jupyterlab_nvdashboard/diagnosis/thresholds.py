"""Every threshold the diagnosis uses, each with its source beside it.

Sources (collected in the project's research notes on diagnosis prior art):

- **DCGM**: NVIDIA DCGM User Guide, "Feature Overview: Profiling" (SM Active, DRAM Active).
- **Nsight**: Nsight Systems User Guide, "Expert System Rules" (``gpu_gaps``, ``gpu_time_util``).
- **XProf**: openxla/xprof ``op_stats_to_input_pipeline_analysis.cc`` (the TF Profiler's
  input-pipeline analysis).
- **SageMaker**: awslabs/sagemaker-debugger ``smdebug/profiler/analysis/rules``
  (``CPUBottleneck``, ``LowGPUUtilization``).
- **KempnerPulse**: KempnerInstitute/kempnerpulse ``docs/classification.md``.
- **PyTorch profiler**: pytorch/kineto ``tb_plugin`` ``profiler/data.py`` (recommendations).
- **nvml.h**: the clocks-event reason bits.

Where no source sets a number, the comment says "our choice" and why.
"""

from __future__ import annotations

# How many readings of a signal a finding needs before it says anything. The verdict this
# replaces refused below 5; the research notes suggest 30 at 1 Hz for a steady reading,
# which the /GPU-Activity window (minutes) reaches easily. Our choice: 5, so a 5 s run is
# judged, and every finding states its own count so the reader can weigh it.
MIN_SAMPLES = 5

# "Not using the GPU" needs this many readings of the driver's process lists. Our choice: the
# lists are exact, not sampled counters (a process with a context is in every one of them),
# and a run's timed part starts after warm-up, when its context exists; three readings (about
# 3 s, the lists are read once a second) rule out a list read in a gap of the reader.
MIN_LIST_READINGS = 3

# Idle: activity under 5% (KempnerPulse, class "idle": utilization < 5).
IDLE_PCT = 5.0
# A gap in activity counts as starvation from 500 ms (Nsight gpu_gaps: DEFAULT_GAP = 500 ms).
GAP_S = 0.5
# Share of the window in such gaps, or of each step waiting on input: 5% "moderately", 20%
# "highly" input-bound (XProf input-pipeline analysis: < 5 not, 5-20 moderately, >= 20 highly).
STARVED_MODERATE_PCT = 5.0
STARVED_HIGH_PCT = 20.0

# Utilization at or above 80% with SM activity under 50% is launch- or latency-bound:
# DCGM: SM Active >= 0.8 is "necessary, but not sufficient"; < 0.5 "likely indicates
# ineffective GPU usage". (KempnerPulse "busy, low SM": GR >= 40 and SM < 25, a looser form.)
BUSY_UTILIZATION_PCT = 80.0  # DCGM's 0.8, applied to time-based utilization
SM_INEFFECTIVE_PCT = 50.0  # DCGM: SM Active < 0.5
SM_GOOD_PCT = 80.0  # DCGM: SM Active >= 0.8 "necessary, but not sufficient"

# DRAM: ~0.8 is the practical peak (DCGM, DRAM Active): at it, memory is the limit whatever
# SM activity says (resident warps waiting on memory count as active); DRAM >= 50 with SM < 50 is
# memory-bound (KempnerPulse "memory-bound" class). Under 50 it is not the limit.
DRAM_PRACTICAL_PEAK_PCT = 80.0  # DCGM
DRAM_HIGH_PCT = 50.0  # KempnerPulse

# Tensor-heavy: tensor >= 50 with SM >= 60 (KempnerPulse "tensor-heavy").
TENSOR_HEAVY_PCT = 50.0
TENSOR_HEAVY_SM_PCT = 60.0

# Low utilization: under 50% in use (Nsight gpu_time_util reports chunks < 50%; the PyTorch
# profiler recommends a bigger batch below 0.5).
LOW_UTILIZATION_PCT = 50.0

# A link near its own maximum: 80% of that link's one-direction maximum. Our choice: no source
# sets a share; 0.8 mirrors DCGM's practical DRAM peak, and DCGM notes that PCIe counters
# include protocol headers, so the payload peak is lower still. The SMs "wait" under 30%
# SM activity (KempnerPulse "I/O" class: SM < 30).
LINK_NEAR_MAX = 0.8
LINK_SM_WAITING_PCT = 30.0

# Throttled: a clocks-event reason other than idle in at least 10% of the window. Our choice:
# the research notes say plainly that no source sets this share.
THROTTLED_SHARE_PCT = 10.0
# nvml.h reason bits that hold a busy GPU's clocks down (never 0x1 GpuIdle).
THROTTLE_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

# Host-CPU-bound: GPU < 10% while CPU > 90%, in more than 50% of the samples (SageMaker
# CPUBottleneck: gpu_threshold 10, cpu_threshold 90, threshold 50 %).
HOST_GPU_LOW_PCT = 10.0
HOST_CPU_HIGH_PCT = 90.0
HOST_SHARE_PCT = 50.0
