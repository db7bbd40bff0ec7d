// Which lease holds a peer subnet when leases overlap. Two leases on one
// subnet, or one inside the other (10.99.2.128/25 in 10.99.2.0/24), would
// share a route or a neighbour entry: the last one programmed would take the
// other node's traffic. So an overlapping pair is a conflict, and the
// established lease keeps its traffic: the one whose node came first (a
// Kubernetes Node's creationTimestamp: the same after a restart), else the
// one this daemon saw first. The other is not programmed, and says why,
// until the established one goes.
import { Prefix } from '../../net/ip';
import { MultiMap } from '../../util/multi-map';
import { describeSubnets, type Lease } from '../lease';

interface Claim {
  lease: Lease;
  subnet: Prefix;
  key: string;
  /** When its node came (ms since the epoch), when the manager knows; else after every lease that has one. */
  since: number;
  /** Arrival order: breaks ties, and ranks the leases of a store. */
  seq: number;
}

/** Whether claim `a` was established before claim `b`. */
const before = (a: Claim, b: Claim) => a.since < b.since || (a.since === b.since && a.seq < b.seq);

/** A lease for log lines: its subnets and its Node's name when it has one. */
export const nameOfLease = (l: Lease) => `lease ${describeSubnets(l)}${l.node ? ` (node ${JSON.stringify(l.node)})` : ''}`;

/** The peer subnets of one family the leases claim, and which claims stand. */
export class SubnetClaims {
  private readonly byKey = new MultiMap<string, Claim>();
  private readonly byLease = new Map<Lease, Claim>();
  /** The subnets claimed, by prefix length: a subnet's overlapping claims are found without a scan of them all. */
  private readonly byLength = new Map<number, Map<string, Prefix>>();
  private seq = 0;

  clear(): void {
    this.byKey.clear();
    this.byLease.clear();
    this.byLength.clear();
  }

  /** `rank`: the arrival rank of the claim it replaces (a lease rewritten stays established), from remove(). */
  add(lease: Lease, subnet: Prefix, key: string, rank?: number): void {
    const claim: Claim = { lease, subnet, key, since: lease.since ?? Number.MAX_VALUE, seq: rank ?? this.seq++ };
    this.byLease.set(lease, claim);
    this.byKey.add(key, claim);
    let ofLength = this.byLength.get(subnet.length);
    if (!ofLength) this.byLength.set(subnet.length, (ofLength = new Map()));
    ofLength.set(key, subnet);
  }

  /** Takes the claim out; returns its arrival rank. */
  remove(lease: Lease, key: string): number | undefined {
    const claim = this.byLease.get(lease);
    if (!claim) return undefined;
    this.byLease.delete(lease);
    this.byKey.delete(key, claim);
    if (!this.byKey.has(key)) {
      const ofLength = this.byLength.get(claim.subnet.length)!;
      ofLength.delete(key);
      if (!ofLength.size) this.byLength.delete(claim.subnet.length);
    }
    return claim.seq;
  }

  /** The subnet keys claimed. */
  keys(): IterableIterator<string> {
    return this.byKey.keys();
  }

  /** The leases claiming `key`. */
  at(key: string): Lease[] {
    return this.byKey.get(key).map((c) => c.lease);
  }

  /** The keys of the claims overlapping `subnet` (keyed `key`: its own key included when claimed). */
  overlapping(subnet: Prefix, key = subnet.toString()): string[] {
    const keys: string[] = [];
    for (const [length, claimed] of this.byLength) {
      if (length <= subnet.length) {
        // the one subnet of that length holding it (usually its own: every lease of one size)
        const holder = length === subnet.length ? key : Prefix.of(subnet.address, length).toString();
        if (claimed.has(holder)) keys.push(holder);
      } else {
        for (const [key, p] of claimed) if (subnet.contains(p.network)) keys.push(key);
      }
    }
    return keys;
  }

  /** The established claim `lease` overlaps, when there is one: then `lease` does not stand. */
  blocker(lease: Lease): Lease | undefined {
    const claim = this.byLease.get(lease);
    if (!claim) return undefined;
    let first: Claim | undefined;
    for (const key of this.overlapping(claim.subnet, claim.key)) {
      for (const c of this.byKey.get(key)) if (c !== claim && before(c, claim) && (!first || before(c, first))) first = c;
    }
    return first?.lease;
  }

  /** Why the leases claiming `key` that an established claim overlaps are not programmed. */
  conflictsAt(key: string): string[] {
    const out: string[] = [];
    for (const l of this.at(key)) {
      const first = this.blocker(l);
      if (first) out.push(`${nameOfLease(l)}: overlaps ${nameOfLease(first)}, which was there first: not programmed`);
    }
    return out;
  }
}
