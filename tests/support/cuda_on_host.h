// Runs this project's CUDA kernels on the CPU, for tests on machines without a GPU.
//
// Semantics follow the CUDA C++ Programming Guide: one std::thread per CUDA thread of a
// warp, the 32 lanes of a warp running concurrently and warps one after another;
// atomicAdd returns the old value; __shfl_xor_sync(mask, v, m) returns lane (lane ^ m)'s
// v, and every lane named in the full mask must execute it (a lane that has exited is an
// error here, undefined behaviour on a GPU: it is counted in cuda_on_host_errors).
// Memory-model and timing effects of a real GPU are out of its reach.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline

using std::exp;
using std::sqrt;

static std::atomic<int> cuda_on_host_errors{0};

struct HostWarp {
    std::barrier<> step{32};
    unsigned char slot[32][8];
    int shuffles[32] = {0};
};

thread_local HostWarp* current_warp = nullptr;
thread_local int current_lane = 0;

inline int atomicAdd(int* p, int x) { return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned x) {
    return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long x) {
    return __atomic_fetch_add(p, x, __ATOMIC_SEQ_CST);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    HostWarp& w = *current_warp;
    int lane = current_lane, partner = current_lane ^ lane_mask;
    if (mask != 0xffffffffu) cuda_on_host_errors++;  // only full-warp shuffles are used
    std::memcpy(w.slot[lane], &value, sizeof(T));
    w.shuffles[lane]++;
    w.step.arrive_and_wait();
    if (partner > 31 || w.shuffles[partner] != w.shuffles[lane]) cuda_on_host_errors++;
    T out = value;
    if (partner <= 31) std::memcpy(&out, w.slot[partner], sizeof(T));
    w.step.arrive_and_wait();
    return out;
}

// Runs body() as every thread of a 1-D grid; returns the errors counted meanwhile.
// 32 host threads play the lanes; each walks the warps in order, with one HostWarp
// (barrier and shuffle slots) per warp.
inline int cuda_on_host_launch(unsigned grid, unsigned block, const std::function<void()>& body) {
    cuda_on_host_errors = 0;
    if (block % 32 != 0) return -1;
    gridDim.x = grid;
    blockDim.x = block;
    const unsigned long long warps_per_block = block / 32, warps = grid * warps_per_block;
    std::unique_ptr<HostWarp[]> warp(new HostWarp[warps]);
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < 32; ++lane) {
        lanes.emplace_back([&, lane] {
            current_lane = lane;
            for (unsigned long long w = 0; w < warps; ++w) {
                blockIdx.x = (unsigned)(w / warps_per_block);
                threadIdx.x = (unsigned)((w % warps_per_block) * 32 + lane);
                current_warp = &warp[w];
                body();
                warp[w].step.arrive_and_drop();  // an exited lane no longer takes part
            }
        });
    }
    for (auto& t : lanes) t.join();
    return cuda_on_host_errors.load();
}
