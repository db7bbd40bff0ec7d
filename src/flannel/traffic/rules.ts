// flanneld's host firewall rules for the daemon: --ip-masq (masquerade what
// leaves the cluster network) and --iptables-forward-rules (accept forwarding
// to and from it), per family, with iptables (traffic-iptables.ts) or
// nftables (traffic-nftables.ts, flanneld's EnableNFTables).
//
// ensure* is meant to be called every --iptables-resync seconds: it lists our
// rules once and changes nothing when they are all there; it never touches
// another program's rules. remove* takes away exactly ours.
import type { Prefix } from '../../net/ip';
import { exec } from '../../iproute/exec';
import { FORWARD_PLACE, MASQ_PLACE, forwardChainSet, iptablesEnsure, iptablesRemove, masqChainSet } from './iptables';
import { nftEnsure, nftForwardSet, nftMasqSet, nftRemove } from './nftables';

export type TrafficBackend = 'iptables' | 'nftables';

/** One family's cluster network and this node's subnet of it. */
export interface ClusterNet {
  network: Prefix;
  subnet: Prefix;
}

export interface TrafficOptions {
  /** Network namespace to work in; the daemon's own when absent. */
  netns?: string;
}

export interface MasqOptions extends TrafficOptions {
  /** MASQUERADE --random-fully / masquerade fully-random (flanneld's default; --ip-masq-random-fully-disable turns it off). */
  randomFully?: boolean;
}

/** What an ensure call changed, one line per family and rule set ("IPv4 masquerade rules (iptables)"), for the log. */
export type Changes = string[];

const label = (family: 4 | 6, what: string, backend: TrafficBackend) => `IPv${family} ${what} rules (${backend})`;

/** Makes the masquerade rules of every family in `nets` present. */
export async function ensureMasqRules(backend: TrafficBackend, nets: readonly ClusterNet[], o: MasqOptions = {}): Promise<Changes> {
  const randomFully = o.randomFully ?? true;
  const changed = await Promise.all(
    nets.map(({ network, subnet }) => {
      const [family, net, sub] = [network.family, network.toString(), subnet.toString()] as const;
      return backend === 'nftables'
        ? nftEnsure(nftMasqSet(family, net, sub, randomFully), o.netns)
        : iptablesEnsure(family, masqChainSet(family, net, sub, randomFully), o.netns);
    }),
  );
  return nets.flatMap((n, i) => (changed[i] ? [label(n.network.family, 'masquerade', backend)] : []));
}

/** Removes our masquerade rules of `families`; returns the families that had some. */
export async function removeMasqRules(backend: TrafficBackend, families: readonly (4 | 6)[], o: TrafficOptions = {}): Promise<(4 | 6)[]> {
  const removed = await Promise.all(
    families.map((f) => (backend === 'nftables' ? nftRemove(f, 'postrtg', o.netns) : iptablesRemove(f, MASQ_PLACE, o.netns))),
  );
  return families.filter((_, i) => removed[i]);
}

/** Makes the FORWARD accept rules of every network present. */
export async function ensureForwardRules(backend: TrafficBackend, networks: readonly Prefix[], o: TrafficOptions = {}): Promise<Changes> {
  const changed = await Promise.all(
    networks.map((n) =>
      backend === 'nftables' ? nftEnsure(nftForwardSet(n.family, n.toString()), o.netns) : iptablesEnsure(n.family, forwardChainSet(n.toString()), o.netns),
    ),
  );
  return networks.flatMap((n, i) => (changed[i] ? [label(n.family, 'forward', backend)] : []));
}

/** Removes our FORWARD rules of `families`; returns the families that had some. */
export async function removeForwardRules(backend: TrafficBackend, families: readonly (4 | 6)[], o: TrafficOptions = {}): Promise<(4 | 6)[]> {
  const removed = await Promise.all(
    families.map((f) => (backend === 'nftables' ? nftRemove(f, 'forward', o.netns) : iptablesRemove(f, FORWARD_PLACE, o.netns))),
  );
  return families.filter((_, i) => removed[i]);
}

/** The oldest iptables whose MASQUERADE takes --random-fully (go-iptables' HasRandomFully, which flanneld asks). */
const RANDOM_FULLY_SINCE = [1, 6, 2];

/**
 * Whether masquerading can be fully random here, decided as flanneld decides
 * it: iptables 1.6.2 or newer; with nftables, a `masquerade fully-random`
 * rule the kernel accepts (`nft -c`: checked, nothing is changed). Resolves
 * with why not, or undefined when it can.
 */
export async function randomFullyUnsupported(backend: TrafficBackend, o: TrafficOptions = {}): Promise<string | undefined> {
  try {
    if (backend === 'iptables') {
      const { stdout } = await exec(['iptables', '--version'], { netns: o.netns });
      const v = /v(\d+)\.(\d+)\.(\d+)/.exec(stdout)?.slice(1).map(Number);
      if (!v) return `cannot read the version of iptables from ${JSON.stringify(stdout.trim())}`;
      const i = v.findIndex((n, k) => n !== RANDOM_FULLY_SINCE[k]);
      return i === -1 || v[i] > RANDOM_FULLY_SINCE[i] ? undefined : `iptables ${v.join('.')} is older than ${RANDOM_FULLY_SINCE.join('.')}`;
    }
    const probe = [
      'add table ip flannel-probe',
      'add chain ip flannel-probe p { type nat hook postrouting priority srcnat; }',
      'add rule ip flannel-probe p ip saddr != 127.0.0.1 masquerade fully-random',
      '',
    ].join('\n');
    await exec(['nft', '-c', '-f', '-'], { netns: o.netns, input: probe });
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}
