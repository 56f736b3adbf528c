#pragma once
// Compiled into node-llama-cpp's addon by `npm run engine:build` (scripts/engine-build.mjs), which
// includes this header in addon/AddonContext.cpp and runs the addon's decode and sampling calls
// through plinth::onDecodeThread.
//
// Why: the addon runs each llama_decode on whichever libuv worker is free. With OpenMP (the build
// made on this machine has it), every thread that opens a parallel region gets a team of helper
// threads of its own, so four libuv workers made up to four teams: more threads than cores, at
// which point libgomp stops spinning at its barriers and sleeps at every one of them. Measured on a
// 2-core VM, one sequence at 2 threads: 85-94 tok/s that way, 124-136 with every decode on one
// thread (docs/benchmarks.md). One long-lived thread that does all decodes and samplings of the
// process keeps one team, the way llama-server's single loop thread does; sampling there too reads
// the logits on the core that just wrote them and saves a hop between threads per token.
// PLINTH_DECODE_INLINE=1 turns it off (both run on the libuv worker, as in the stock addon).
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace plinth {

class DecodeThread {
    public:
        DecodeThread() : worker([this] { loop(); }) {
            worker.detach();
        }

        // Runs `job` on the decode thread and returns once it is done; called from a libuv worker.
        // With `onlyIfIdle`, a job that would have to queue behind another runs on the caller's
        // thread instead (returns false without running it).
        bool run(const std::function<void()>& job, bool onlyIfIdle = false) {
            std::mutex doneMutex;
            std::condition_variable doneCv;
            bool done = false;
            {
                std::lock_guard<std::mutex> lock(mutex);
                if (onlyIfIdle && pending > 0) return false;
                pending++;
                jobs.push_back([&] {
                    job();
                    {
                        // Before the caller hears of it: the sampling that follows a decode must
                        // find the thread idle.
                        std::lock_guard<std::mutex> lock(mutex);
                        pending--;
                    }
                    std::lock_guard<std::mutex> doneLock(doneMutex);
                    done = true;
                    doneCv.notify_one();
                });
            }
            cv.notify_one();
            std::unique_lock<std::mutex> doneLock(doneMutex);
            doneCv.wait(doneLock, [&] { return done; });
            return true;
        }

        // Queues `work` on the decode thread and returns at once; `report` runs there right after it,
        // once the thread no longer counts it as pending (as `run` does before its caller hears).
        void post(std::function<void()> work, std::function<void()> report) {
            {
                std::lock_guard<std::mutex> lock(mutex);
                pending++;
                jobs.push_back([this, work = std::move(work), report = std::move(report)] {
                    work();
                    {
                        std::lock_guard<std::mutex> lock(mutex);
                        pending--;
                    }
                    report();
                });
            }
            cv.notify_one();
        }

    private:
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<std::function<void()>> jobs;
        // Jobs queued or running.
        int pending = 0;
        // Declared last, so the queue exists before the thread starts reading it.
        std::thread worker;

        void loop() {
            for (;;) {
                std::function<void()> job;
                {
                    std::unique_lock<std::mutex> lock(mutex);
                    cv.wait(lock, [this] { return !jobs.empty(); });
                    job = std::move(jobs.front());
                    jobs.pop_front();
                }
                job();
            }
        }
};

inline bool decodeInline() {
    static const bool value = [] {
        const char* v = std::getenv("PLINTH_DECODE_INLINE");
        return v != nullptr && v[0] == '1';
    }();
    return value;
}

inline DecodeThread& decodeThread() {
    // Never destroyed: the thread lives as long as the process, and a static destructor racing a
    // late decode at exit would be worse than the leak.
    static DecodeThread* thread = new DecodeThread();
    return *thread;
}

// Runs `work` on the process's decode thread, passing any exception back to the caller; with
// `onlyIfIdle` and the thread busy, runs it here instead.
template <typename Work>
void runOnDecodeThread(Work&& work, bool onlyIfIdle) {
    if (decodeInline()) {
        work();
        return;
    }
    std::exception_ptr failure;
    const bool ran = decodeThread().run([&] {
        try {
            work();
        } catch (...) {
            failure = std::current_exception();
        }
    }, onlyIfIdle);
    if (!ran) {
        work();
        return;
    }
    if (failure) std::rethrow_exception(failure);
}

// Decodes: always on the decode thread.
template <typename Work>
void onDecodeThread(Work&& work) {
    runOnDecodeThread(work, false);
}

// Sampling: on the decode thread when it is idle (one stream: between two decodes it always is, and
// the token then needs no extra hop), else right here. Several samplings at once (eight streams, or
// the log-probability reader's two or three per token) then run side by side on libuv's workers
// instead of queueing on one thread: serialised, a JSON schema with logprobs fell from 0.57 to 0.39
// of plain decoding.
template <typename Work>
void sampleOnDecodeThreadIfIdle(Work&& work) {
    runOnDecodeThread(work, true);
}

}  // namespace plinth
