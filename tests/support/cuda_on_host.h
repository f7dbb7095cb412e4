// Runs this project's CUDA kernels on the CPU, for tests on machines without a GPU.
//
// Semantics follow the CUDA C++ Programming Guide: the 32 lanes of a warp run in
// lockstep phases between shuffles, and warps one after another; atomicAdd returns the
// old value; __shfl_xor_sync(mask, v, m) returns lane (lane ^ m)'s v, and every lane
// named in the full mask must execute it (a lane that has exited is an error here,
// undefined behaviour on a GPU: it is counted in cuda_on_host_errors).
// Memory-model and timing effects of a real GPU are out of its reach.
//
// The lanes are coroutines (ucontext) on the launching thread, not one OS thread each:
// 32 threads meeting at a barrier at every shuffle ran 13 times slower on a two-core
// machine with a busy process per core, because every barrier waited for all 32 to be
// scheduled. A coroutine runs until it reaches the warp's barrier, so the load of the
// machine changes how fast a launch runs, never whether it finishes.
#pragma once
#include <ucontext.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

// Per launching thread: the sharded path launches from one thread per shard at once.
thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline

using std::exp;
using std::sqrt;

thread_local int cuda_on_host_errors = 0;

struct HostWarp {
    unsigned char slot[32][8];
    int shuffles[32] = {0};
};

// The launch in progress: the scheduler's context, each lane's, and where each lane is.
struct HostLaunch {
    static constexpr size_t STACK = 256 * 1024;
    ucontext_t scheduler;
    ucontext_t lane[32];
    bool warp_done[32];
    std::unique_ptr<char[]> stacks{new char[32 * STACK]};
    const std::function<void()>* body = nullptr;
    unsigned long long warps = 0;
};

thread_local HostLaunch* current_launch = nullptr;
thread_local HostWarp* current_warp = nullptr;
thread_local int current_lane = 0;

inline int atomicAdd(int* p, int x) { return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned x) {
    return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long x) {
    return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST);
}

// This lane waits here until every lane of its warp that has not exited arrives too.
inline void host_warp_barrier() {
    swapcontext(&current_launch->lane[current_lane], &current_launch->scheduler);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    HostWarp& w = *current_warp;
    int lane = current_lane, partner = current_lane ^ lane_mask;
    if (mask != 0xffffffffu) cuda_on_host_errors++;  // only full-warp shuffles are used
    std::memcpy(w.slot[lane], &value, sizeof(T));
    w.shuffles[lane]++;
    host_warp_barrier();
    if (partner > 31 || w.shuffles[partner] != w.shuffles[lane]) cuda_on_host_errors++;
    T out = value;
    if (partner <= 31) std::memcpy(&out, w.slot[partner], sizeof(T));
    host_warp_barrier();
    return out;
}

// One lane of the launch: body() for this lane of every warp in turn; between warps it
// hands back to the scheduler, which starts the next warp once all 32 are through.
inline void host_lane_main() {
    HostLaunch& launch = *current_launch;
    for (unsigned long long w = 0; w < launch.warps; ++w) {
        (*launch.body)();
        launch.warp_done[current_lane] = true;
        host_warp_barrier();
    }
}

// Runs body() as every thread of a 1-D grid; returns the errors counted meanwhile.
// Phases: the scheduler resumes each lane still in the warp until it reaches the
// barrier or exits; a phase ends when all of them have, so a lane resumed after a
// shuffle's first barrier finds every other lane's value written.
inline int cuda_on_host_launch(unsigned grid, unsigned block, const std::function<void()>& body) {
    cuda_on_host_errors = 0;
    if (block % 32 != 0) return -1;
    gridDim.x = grid;
    blockDim.x = block;
    HostLaunch launch;
    launch.body = &body;
    const unsigned long long warps_per_block = block / 32;
    launch.warps = grid * warps_per_block;
    std::unique_ptr<HostWarp[]> warp(new HostWarp[launch.warps]);
    current_launch = &launch;
    for (int lane = 0; lane < 32; ++lane) {
        getcontext(&launch.lane[lane]);
        launch.lane[lane].uc_stack.ss_sp = launch.stacks.get() + lane * HostLaunch::STACK;
        launch.lane[lane].uc_stack.ss_size = HostLaunch::STACK;
        launch.lane[lane].uc_link = &launch.scheduler;
        makecontext(&launch.lane[lane], host_lane_main, 0);
    }
    for (unsigned long long w = 0; w < launch.warps; ++w) {
        current_warp = &warp[w];
        blockIdx.x = (unsigned)(w / warps_per_block);
        std::memset(launch.warp_done, 0, sizeof launch.warp_done);
        for (int running = 32; running > 0;) {
            running = 0;
            for (int lane = 0; lane < 32; ++lane) {
                if (launch.warp_done[lane]) continue;
                current_lane = lane;
                threadIdx.x = (unsigned)((w % warps_per_block) * 32 + lane);
                swapcontext(&launch.scheduler, &launch.lane[lane]);
                running += !launch.warp_done[lane];
            }
        }
    }
    for (int lane = 0; lane < 32; ++lane) {  // each lane returns from host_lane_main
        current_lane = lane;
        swapcontext(&launch.scheduler, &launch.lane[lane]);
    }
    current_launch = nullptr;
    return cuda_on_host_errors;
}
