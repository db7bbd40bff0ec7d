// --ip-blackhole-route (flanneld's): a blackhole route for this node's own
// subnet, so that traffic to one of its addresses that no pod holds is
// dropped here instead of leaving by the default route (setups where no
// bridge route covers the subnet, e.g. Canal's per-pod routes).
//
// flanneld adds it with metric 0. The kernel then keeps it beside the
// bridge's own route to the subnet (cni0, metric 0) and uses whichever came
// first: a blackhole added before the first pod made cni0 swallows the
// traffic to every pod of the node. Ours has metric BLACKHOLE_METRIC, so any
// route to the subnet (the bridge's: 0, IPv6 256) wins and the blackhole only
// catches what nothing else routes. A blackhole of that metric inside the
// overlay network for another subnet is ours from an earlier lease: removed.
import { Prefix } from '../../net/ip';
import { exec, ipJson } from '../../iproute/exec';
import type { IpRoute } from '../../iproute/route';

export const BLACKHOLE_METRIC = 1024;

/**
 * Puts our blackhole route to `subnet` in place and removes ours to other
 * subnets of `network`; resolves with one line per change (for the log).
 */
export async function ensureBlackhole(subnet: Prefix, network: Prefix): Promise<string[]> {
  const family = `-${subnet.family}`;
  const routes = await ipJson<IpRoute[]>([family, 'route', 'show', 'type', 'blackhole', 'root', network.toString()]);
  const ours = routes.filter((r) => r.metric === BLACKHOLE_METRIC).map((r) => Prefix.parse(r.dst)?.toString() ?? r.dst);
  const changes: string[] = [];
  for (const dst of ours) {
    if (dst === subnet.toString()) continue;
    await exec(['ip', family, 'route', 'del', 'blackhole', dst, 'metric', String(BLACKHOLE_METRIC)]);
    changes.push(`removed the blackhole route to ${dst} (not our subnet)`);
  }
  if (!ours.includes(subnet.toString())) {
    await exec(['ip', family, 'route', 'add', 'blackhole', subnet.toString(), 'metric', String(BLACKHOLE_METRIC)]);
    changes.push(`added a blackhole route to ${subnet} (metric ${BLACKHOLE_METRIC})`);
  }
  return changes;
}

/** Removes our blackhole route to `subnet` (the node leaves: --release-on-exit); nothing when there is none. */
export async function removeBlackhole(subnet: Prefix): Promise<void> {
  const family = `-${subnet.family}`;
  const routes = await ipJson<IpRoute[]>([family, 'route', 'show', 'type', 'blackhole', 'root', subnet.toString()]);
  if (!routes.some((r) => r.metric === BLACKHOLE_METRIC && Prefix.parse(r.dst)?.toString() === subnet.toString())) return;
  await exec(['ip', family, 'route', 'del', 'blackhole', subnet.toString(), 'metric', String(BLACKHOLE_METRIC)]);
}
