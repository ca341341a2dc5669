/**
 * The section of BENCHMARKS.md that accounts for `full` − `normal` at one connection (issue 45, decision 4):
 * measured by hand outside a run (perf trace and interleaved A/B pairs), so it is text, not a table of the run.
 * Rewrite it when the commit path changes.
 */
export function durableCommitSection(): string[] {
  return [
    '## Where the durable commit\'s time goes (`full` − `normal`)',
    '',
    'Measured 2026-11-28 outside a run, on this machine while other work shared its 2 cores (load average 2–5): svc-router `full` and `normal` beside each other, 3,000 requests of the latency workload per round after 6,000 of warm-up, three interleaved rounds (wall-clock pairs, so read the direction and the size, not the digits). The requests at `full` and the syscalls below come from `perf trace` of the router\'s process, all threads, over 1,000 requests; the in-process times from a build timing `fdatasync` from its call to its callback and each batch from its start to its callback (not committed).',
    '',
    '|  | round 1 | round 2 | round 3 |',
    '| --- | ---: | ---: | ---: |',
    '| p50 at `full` | 665 µs | 449 µs | 470 µs |',
    '| p50 at `normal` | 416 µs | 238 µs | 300 µs |',
    '| `full` − `normal` | 249 µs | 211 µs | 170 µs |',
    '| a thread-pool `fdatasync` of the same write (4 `pwrite64` of 2 WAL frames, then `fs.fdatasync` on libuv\'s pool; call to callback), p50 | 112 µs | 97 µs | 103 µs |',
    '| in svc-router: its `fdatasync`, call to callback, p50 | 193 µs | 169 µs | 151 µs |',
    '| in svc-router: a charge batch, start to callback, p50 at `full` / at `normal` | 240 / 42 µs | 208 / 28 µs | 184 / 36 µs |',
    '',
    'What happens between the provider\'s last byte and the client\'s last byte, per request at `full` (perf trace, 1,000 requests): the provider\'s answer is read; in the same turn of the loop (the charge writer\'s `setImmediate`, the check phase right after the poll: `normal` has it too) the batch\'s transaction runs: 4 `fcntl` locks of the `-shm`, 4 `pwrite64` (2 frames of 24 + 4,096 bytes: the journal\'s leaf page and the `request_id` index\'s), 2 `fcntl` unlocks; a `futex` wake hands the flush to a pool thread, which first waits on libuv\'s queue mutex still held by the loop (a second `futex`), runs one `fdatasync` of the WAL, writes libuv\'s `eventfd`; the loop wakes from `epoll_pwait`, reads the `eventfd` (sometimes waiting once more on the queue mutex, held by the pool thread while it signals), runs the callbacks and writes the answer (`sendto`). Counted over the 1,000 requests: 1,000 `fdatasync` (exactly one per commit: no second flush), 6.3 `fcntl` per request (the 0.3: the change poll\'s reads), 12 `fsync` on the upkeep thread (two upkeeps of 500 writes, its checkpoints: none on the loop, none that a charge waits for except when one overlaps its flush, a tail effect). Median gaps under the trace, which adds 15–20 µs to each traced syscall: submit to `fdatasync` entered 140 µs, `fdatasync` 155 µs, its end to the `eventfd` 23 µs, the `eventfd` to `sendto` 123 µs. Traced alone (`perf trace -e fdatasync`, light), the `fdatasync` syscall took p50 134 µs (p10 108, p90 399).',
    '',
    'So, of the questions of decision 4: one flush per commit, not several; the checkpoint is on the upkeep thread and not on the median path; the batch timer is the same `setImmediate` in both modes and costs nothing extra at `full`; the batch itself costs the same in both modes (28–42 µs) apart from waiting for its flush. `full` − `normal` is the flush as the loop sees it (151–193 µs, of which the syscall ~134 µs and the hop to the pool and back ~20–50 µs) plus 20–60 µs more that no syscall shows: the loop, asleep for the flush, waking to cold caches, which `normal` never does. Against a thread-pool `fdatasync` of the same write in a process of its own (97–112 µs), the same syscall takes longer in svc-router: traced alone in two interleaved rounds (`perf trace -e fdatasync`), 132 and 157 µs median in svc-router against 95 and 112 µs in a probe that does what a charge does (better-sqlite3, WAL, `synchronous=NORMAL`, one `INSERT` with a unique text key per transaction, a checkpoint every 500, then `fs.fdatasync` of the WAL on the pool: 4.5 `pwrite64` a commit, the same two frames). The hop alone is within the noise of a probe (`fdatasync` on the pool 94–131 µs p50, on the calling thread 111–119 µs), and libuv\'s io_uring (`UV_USE_IO_URING=1`, which Node turns off by default) did not change the probe (102–112 against 109–167 µs). Not proven, but what is left is where the flush completes: in svc-router the simulator and the generator finish their own turn on the same 2 cores as the pool thread wakes from its `fdatasync`, which no probe alone meets. That, not the commit path, is most of the distance to the target (1.7–2.4× against ≤ 1.5×). The old reference, one frame overwritten and flushed on the calling thread, is smaller than what a charge writes (two frames).',
    '',
  ]
}
