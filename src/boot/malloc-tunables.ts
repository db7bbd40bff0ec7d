// The node daemon's settings for glibc's malloc. glibc reads them from
// GLIBC_TUNABLES once, when a process starts, so the standalone executable
// restarts itself with them (same pid) when it starts as the daemon without
// them. A long-running process only: a plugin call exits before its heap
// matters.
//
// Why: glibc raises its mmap threshold to the size of each large block that is
// freed (up to 32 MiB), after which blocks of that size (an API page, a kernel
// listing: 100 KiB to megabytes at 5,000 Nodes) come from heaps it seldom
// gives back, and it makes a heap per thread (8 per core) for V8's and libuv's
// threads. Measured at 5,000 Nodes (A/B, both with V8's --optimize-for-size):
// 89-91 MiB RSS, 40-42 of it anonymous, against 105-106 (56-57) without them
// (docs/speed.md, "Memory at 5,000 Nodes"; the threshold lowered to 64, then 16 KiB:
// "The main heap's 64 KiB reads" and "No optimizing compiler, TLS only where it is asked for,
// and TLS's buffers").

/** The tunables the daemon starts with, unless the operator's GLIBC_TUNABLES sets them already. */
export const DAEMON_MALLOC_TUNABLES: Readonly<Record<string, string>> = {
  // fixed: blocks of 16 KiB and more are mapped alone and unmapped when freed. At 5,000 Nodes
  // glibc's main heap held 9-11 MiB with 128 KiB (Node reads a socket or a pipe into a 64 KiB
  // block, then shrinks it to what came), ~5 with 64 KiB, and 11.5 again over TLS (OpenSSL's
  // and Node's TLS buffers of 16-18 KiB, taken and given back as records come): 4.3 with 16
  'glibc.malloc.mmap_threshold': '16384',
  'glibc.malloc.arena_max': '2',
};

/**
 * GLIBC_TUNABLES with those of DAEMON_MALLOC_TUNABLES it does not set yet
 * added at the end; undefined when it sets them all (the operator's values
 * win, and a restart that changes nothing is not needed).
 */
export function withDaemonTunables(current: string | undefined): string | undefined {
  const set = new Set((current ?? '').split(':').map((item) => item.split('=')[0]));
  const missing = Object.entries(DAEMON_MALLOC_TUNABLES).filter(([name]) => !set.has(name));
  if (missing.length === 0) return undefined;
  return [...(current ? [current] : []), ...missing.map(([name, value]) => `${name}=${value}`)].join(':');
}

/** Whether these arguments (after the executable's) start the node daemon: `vxlan-flannel daemon ...`. */
export const startsDaemon = (name: string, args: readonly string[]): boolean => name === 'vxlan-flannel' && args[0] === 'daemon';
