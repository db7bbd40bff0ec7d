// Build-time stand-in for signal-exit inside proper-lockfile (see build.mjs).
// proper-lockfile uses it to remove a held lock when the process exits; plain
// 'exit' covers normal exits, and a lock left by a signal is reclaimed as stale.
// signal-exit loads `assert` and `events`: ~7 ms on every CNI call.
type Handler = (code: number | null, signal: string | null) => void;

function onExit(handler: Handler): () => void {
  const listener = (code: number) => handler(code, null);
  process.once('exit', listener);
  return () => process.removeListener('exit', listener);
}

module.exports = onExit;
