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
  /** Arrival order: breaks ties, and ranks the leases of a store. */
  seq: number;
}

/** When a claim's node came (ms since the epoch), when the manager knows; else after every lease that has one. */
const sinceOf = (c: Claim) => c.lease.since ?? Number.MAX_VALUE;

/** Whether claim `a` was established before claim `b`. */
const before = (a: Claim, b: Claim) => sinceOf(a) < sinceOf(b) || (sinceOf(a) === sinceOf(b) && a.seq < b.seq);

/** A lease for log lines: its subnets and its Node's name when it has one. */
export const nameOfLease = (l: Lease) => `lease ${describeSubnets(l)}${l.node ? ` (node ${JSON.stringify(l.node)})` : ''}`;

/**
 * The peer subnets of one family the leases claim, and which claims stand.
 * Kept by subnet only (a lease's claim is found under its key): at 5,000
 * peers each table of 5,000 entries is ~224 KiB of V8's heap.
 */
export class SubnetClaims {
  private readonly byKey = new MultiMap<string, Claim>();
  /** The subnet keys claimed, by prefix length: a subnet's overlapping claims are found without a scan of them all. */
  private readonly byLength = new Map<number, Set<string>>();
  private seq = 0;

  clear(): void {
    this.byKey.clear();
    this.byLength.clear();
  }

  /** `rank`: the arrival rank of the claim it replaces (a lease rewritten stays established), from remove(). */
  add(lease: Lease, subnet: Prefix, key: string, rank?: number): void {
    // (the lease's `since` is read where needed: a copy here would be a number object of its own per claim)
    const claim: Claim = { lease, subnet, key, seq: rank ?? this.seq++ };
    this.byKey.add(key, claim);
    let ofLength = this.byLength.get(subnet.length);
    if (!ofLength) this.byLength.set(subnet.length, (ofLength = new Set()));
    ofLength.add(key);
  }

  /** Takes `lease`'s claim on `key` out; returns its arrival rank. */
  remove(lease: Lease, key: string): number | undefined {
    const claim = this.byKey.get(key).find((c) => c.lease === lease);
    if (!claim) return undefined;
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

  /** The keys of the claims overlapping `subnet` (keyed `key`: its own key included when claimed). */
  overlapping(subnet: Prefix, key = subnet.toString()): string[] {
    const keys: string[] = [];
    for (const [length, claimed] of this.byLength) {
      if (length <= subnet.length) {
        // the one subnet of that length holding it (usually its own: every lease of one size)
        const holder = length === subnet.length ? key : Prefix.of(subnet.address, length).toString();
        if (claimed.has(holder)) keys.push(holder);
      } else {
        for (const k of claimed) if (subnet.contains(this.byKey.get(k)[0].subnet.network)) keys.push(k);
      }
    }
    return keys;
  }

  /** The lease that stands on `key`: the first claim there that no established claim overlaps. */
  standing(key: string): Lease | undefined {
    for (const c of this.byKey.get(key)) if (!this.blocker(c)) return c.lease;
    return undefined;
  }

  /** Why the leases claiming `key` that an established claim overlaps are not programmed. */
  conflictsAt(key: string): string[] {
    const out: string[] = [];
    for (const c of this.byKey.get(key)) {
      const first = this.blocker(c);
      if (first) out.push(`${nameOfLease(c.lease)}: overlaps ${nameOfLease(first)}, which was there first: not programmed`);
    }
    return out;
  }

  /** The established lease `claim` overlaps, when there is one: then `claim` does not stand. */
  private blocker(claim: Claim): Lease | undefined {
    let first: Claim | undefined;
    for (const key of this.overlapping(claim.subnet, claim.key)) {
      for (const c of this.byKey.get(key)) if (c !== claim && before(c, claim) && (!first || before(c, first))) first = c;
    }
    return first?.lease;
  }
}
