// V8's settings for the node daemon, a long-running process (plugin calls keep V8's defaults: they
// exit before a heap matters). Set as early as the process knows it is the daemon: the standalone
// executable's main script sets them before it compiles any bundle (what the start allocates stays
// sized by them), run-daemon.ts again for the scripts. Each measured in docs/speed.md.

export const DAEMON_V8_FLAGS = [
  // The young generation stays at its initial size instead of growing up to 16 MiB per semi-space:
  // the watch's short-lived garbage (thousands of kubelet heartbeats, each a parsed Node dropped at
  // once) made it grow, and V8 keeps what it grew: ~30 MiB less RSS at 5,000 Nodes for a little more
  // CPU in scavenges ("Cluster scale").
  '--semi-space-growth-factor=1',
  // Size over speed (a smaller old generation between collections, less compiled code kept): with
  // glibc's tunables (boot/malloc-tunables.ts) ~90 MiB at 5,000 Nodes from the start on, a peak of
  // ~100, for ~60-100 ms more garbage collection while the Nodes are read ("Memory at 5,000 Nodes").
  '--optimize-for-size',
  // No optimizing compiler: the interpreter and Sparkplug's baseline code run everything. TurboFan's
  // and Maglev's own code (read from the executable as they run) and what they compile cost ~9 MiB
  // (TurboFan) and 6-7 MiB more (Maglev) at 5,000 Nodes, for no start-up measurable here and a few
  // tenths of a point of a core during heartbeats (3.7% against 3.4%; "No optimizing compiler, ...").
  '--no-turbofan',
  '--no-maglev',
] as const;

export function setDaemonV8Flags(): void {
  // required here, not imported: the standalone executable's main script runs on every plugin call too
  const { setFlagsFromString } = require('node:v8') as typeof import('node:v8');
  for (const flag of DAEMON_V8_FLAGS) setFlagsFromString(flag);
}
