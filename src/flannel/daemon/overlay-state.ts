// What the last reconcile pass found, per VTEP: whether it is up and which
// peers could not be programmed. /healthz, /readyz, the Node's
// NetworkUnavailable condition and the "running" log line all answer from
// this record (no command is run to answer a probe), so they say the same
// thing. The reasons are short and carry nothing from the lease store or
// the kernel's messages (those go to the log): a probe is unauthenticated.

import type { SideState } from '../backend/backend';
export type { SideState };

/** Lists at most three names, then how many more. */
function some(names: readonly string[]): string {
  return names.length <= 3 ? names.join(', ') : `${names.slice(0, 3).join(', ')} and ${names.length - 3} more`;
}

/** Why the overlay is not in place on this node (a short reason), or undefined when every VTEP is up with every peer programmed. */
export function overlayProblem(sides: readonly SideState[]): string | undefined {
  const down = sides.filter((s) => !s.up).map((s) => s.vtep);
  if (down.length) return `VTEP ${down.join(', ')} not up`;
  const failed = sides.flatMap((s) => s.failed);
  const wanted = sides.reduce((n, s) => n + s.wanted, 0);
  if (failed.length) return `${failed.length} of ${wanted} peers not programmed (${some(failed)})`;
  const stale = sides.reduce((n, s) => n + s.staleLeft, 0);
  if (stale) return `${stale} stale peer entries not removed`;
  return undefined;
}

/** For the log: "3 of 3 peers programmed" or "1 of 3 peers programmed; not programmed: 10.88.2.0/24, 10.88.3.0/24". */
export function describePeers(sides: readonly SideState[]): string {
  const failed = sides.flatMap((s) => s.failed);
  const wanted = sides.reduce((n, s) => n + s.wanted, 0);
  return `${wanted - failed.length} of ${wanted} peers programmed${failed.length ? `; not programmed: ${failed.join(', ')}` : ''}`;
}
