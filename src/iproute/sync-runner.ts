// A Runner that blocks until each command exits. For short-lived plugin
// calls whose commands run one after another, it costs less per command than
// the streams of an async spawn (no pipe sockets, no event-loop round trips)
// and loads none of node:child_process (util/spawn-sync.ts); commands meant
// to overlap then run one after the other. Install with setRunner(syncRunner).
import { spawnSyncLean } from '../util/spawn-sync';
import type { Runner } from './exec';

export const syncRunner: Runner = (argv, input) => {
  try {
    const r = spawnSyncLean(argv[0], argv.slice(1), { input });
    return Promise.resolve({ stdout: r.stdout, stderr: r.stderr, code: r.status ?? 1 });
  } catch (err) {
    return Promise.reject(err);
  }
};
