// Whether a peer's public address (its lease's PublicIP or PublicIPv6) can be
// sent to. It becomes an FDB destination (vxlan) or a route's gateway
// (host-gw): a loopback or one of our own addresses sends pod traffic back
// into this node, a broadcast or multicast one to every host on the
// underlay. Only a unicast address of another host will do.
import { IP, Prefix } from '../../net/ip';

/** What this node knows to judge by. */
export interface AddressContext {
  /** This node's own public address of the family: a link-local underlay makes link-local peers fine. */
  publicIP?: IP;
  /** Every address of this node (all its interfaces). */
  own?: readonly IP[];
  /** The subnets the underlay is on: their IPv4 broadcast addresses are not a host. */
  underlay?: readonly Prefix[];
}

const LINK_LOCAL = 'a link-local address';
const SPECIAL: readonly [Prefix, string][] = (
  [
    ['0.0.0.0/8', 'unspecified'],
    ['127.0.0.0/8', 'a loopback address'],
    ['169.254.0.0/16', LINK_LOCAL],
    ['224.0.0.0/4', 'a multicast address'],
    ['255.255.255.255/32', 'the broadcast address'],
    ['240.0.0.0/4', 'a reserved address'],
    ['::/128', 'unspecified'],
    ['::1/128', 'a loopback address'],
    ['fe80::/10', LINK_LOCAL],
    ['ff00::/8', 'a multicast address'],
  ] as const
).map(([p, what]) => [Prefix.parse(p)!, what]);

/** Why `ip` is no peer's address ("is a loopback address"), or undefined when it may be one. */
export function publicAddressProblem(ip: IP, ctx: AddressContext): string | undefined {
  for (const [range, what] of SPECIAL) {
    if (!range.contains(ip)) continue;
    if (what === LINK_LOCAL && ctx.publicIP && range.contains(ctx.publicIP)) break; // the underlay itself is link-local
    return `is ${what}`;
  }
  if (ip.family === 4) {
    const on = ctx.underlay?.find((s) => s.family === 4 && s.length <= 30 && s.last.equals(ip));
    if (on) return `is the broadcast address of the underlay's subnet ${on}`;
  }
  if (ctx.own?.some((o) => o.equals(ip))) return 'is an address of this node';
  return undefined;
}
