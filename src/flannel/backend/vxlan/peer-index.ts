// The peers one VTEP wants, kept lease by lease: a changes pass hands in the
// leases that left and came (a changed lease is both), and learns which
// peer subnets may want something else now, without looking at the other
// leases. Each lease is judged once (verdict, peers.ts; a reset keeps the
// verdicts of the leases it had); then leases are judged against each other:
// - A VTEP MAC names one node on the VTEP (one FDB entry per MAC): leases
//   advertising one MAC for different PublicIPs would steer each other's
//   traffic, so all of them are skipped (which one is genuine cannot be
//   told). Two leases of one node (same MAC, same PublicIP) are no threat.
// - Overlapping subnets (the same one, or one inside another) would share a
//   route or a neighbour entry: the established lease keeps its traffic and
//   the other is skipped (subnet-claims.ts).
// So only the leases sharing a MAC or a piece of the network with a changed
// one are looked at again.
import type { Lease } from '../../lease';
import { Prefix, type IP } from '../../../net/ip';
import { MultiMap } from '../../../util/multi-map';
import { SubnetClaims, nameOfLease } from '../subnet-claims';
import { OURS, type Peer, type Self, type Verdict, verdict } from './peers';

/**
 * The peers of `network`'s family a set of leases asks for, judged at once
 * (status; the daemon keeps a PeerIndex); skips ours, other backends, leases
 * we cannot use and conflicting ones, saying why ("lease <subnets>: <why>").
 */
export function desiredPeers(leases: readonly Lease[], self: Self, network: Prefix): { peers: Peer[]; skipped: string[] } {
  return new PeerIndex(self, network).reset(leases);
}

/** The peer a verdict asks for (none for ours or a lease skipped). */
const peerOf = (v: Verdict | undefined): Peer | undefined => (typeof v === 'object' ? v : undefined);

/** How many of the other leases a MAC conflict names: a MAC copied onto thousands of nodes must not make each line name them all. */
const NAMED_OTHERS = 3;

/** Why a lease whose VTEP MAC others advertise for another PublicIP is skipped. */
export const macConflict = (lease: Lease, mac: string, others: readonly Lease[], data: string) => {
  const named = others.slice(0, NAMED_OTHERS).map(nameOfLease).join(', ');
  const more = others.length > NAMED_OTHERS ? ` and ${others.length - NAMED_OTHERS} more` : '';
  return `${nameOfLease(lease)}: ${data}.VtepMAC ${mac} is also advertised by ${named}${more}: neither is programmed`;
};

export class PeerIndex {
  /** Every lease in the index, with its verdict. */
  private judged = new Map<Lease, Verdict>();
  /** Candidate peers by VTEP MAC, and the subnets they claim. */
  private readonly byMac = new MultiMap<string, Lease>();
  private readonly claims = new SubnetClaims();
  private readonly selfKey: string;
  private readonly data: string;

  constructor(
    private readonly self: Self,
    private readonly network: Prefix,
  ) {
    this.selfKey = self.subnet.toString();
    this.data = network.family === 6 ? 'BackendV6Data' : 'BackendData';
  }

  /** The index of exactly `leases`: every peer they want, and why the others are skipped. */
  reset(leases: readonly Lease[]): { peers: Peer[]; skipped: string[] } {
    // the stores hand out the same object for a lease that did not change: its verdict stands
    const judgedBefore = this.judged;
    this.judged = new Map();
    this.byMac.clear();
    this.claims.clear();
    const skipped = this.add(leases, undefined, judgedBefore);
    const peers: Peer[] = [];
    for (const key of this.claims.keys()) {
      const p = this.wanted(key);
      if (p) peers.push(p);
      skipped.push(...this.claims.conflictsAt(key));
    }
    for (const leasesOfMac of this.byMac.groups()) if (leasesOfMac.length > 1) skipped.push(...this.macConflicts(leasesOfMac));
    return { peers, skipped };
  }

  /** What the index holds that `leases` lacks, and the other way round (compared by identity). */
  diff(leases: readonly Lease[]): { removed: Lease[]; added: Lease[] } {
    const now = new Set(leases);
    const removed = [...this.judged.keys()].filter((l) => !now.has(l));
    const added = leases.filter((l) => !this.judged.has(l));
    return { removed, added };
  }

  /**
   * Takes `removed` out and puts `added` in; returns the subnet keys whose
   * wanted peer may differ now (those the changed leases overlap, and those
   * of the leases sharing a MAC with them), and why leases are skipped.
   */
  apply(removed: readonly Lease[], added: readonly Lease[]): { keys: Set<string>; skipped: string[] } {
    const keys = new Set<string>();
    const macs = new Set<string>();
    /** The arrival rank each removed subnet had: a lease rewritten (removed and added again) keeps it. */
    const ranks = new Map<string, number>();
    for (const l of removed) {
      const p = peerOf(this.judged.get(l));
      this.judged.delete(l);
      if (!p) continue;
      for (const k of this.claims.overlapping(p.subnet, p.key)) keys.add(k);
      this.byMac.delete(p.mac, l);
      const rank = this.claims.remove(l, p.key!)!;
      ranks.set(p.key!, Math.min(rank, ranks.get(p.key!) ?? rank));
      macs.add(p.mac);
    }
    const skipped = this.add(added, ranks);
    for (const l of added) {
      const p = peerOf(this.judged.get(l));
      if (!p) continue;
      for (const k of this.claims.overlapping(p.subnet, p.key)) keys.add(k);
      macs.add(p.mac);
    }
    for (const mac of macs) {
      const group = this.byMac.get(mac);
      for (const l of group) keys.add(this.peer(l).key!);
      if (group.length > 1) skipped.push(...this.macConflicts(group));
    }
    for (const k of keys) skipped.push(...this.claims.conflictsAt(k));
    return { keys, skipped };
  }

  /** The peer wanted on subnet `key`: the established lease there, unless an earlier one overlaps it or its MAC is disputed. */
  wanted(key: string): Peer | undefined {
    const l = this.claims.standing(key);
    return l && !this.disputed(l) ? this.peer(l) : undefined;
  }

  /** The subnets claimed that hold `ip` (a peer's VTEP address is its subnet's first). */
  keysHolding(ip: IP): string[] {
    return this.claims.overlapping(Prefix.of(ip, ip.bits));
  }

  /** The subnets of the leases advertising VTEP MAC `mac`. */
  keysOfMac(mac: string): string[] {
    return this.byMac.get(mac).map((l) => this.peer(l).key!);
  }

  /** How many leases the index holds. */
  get size(): number {
    return this.judged.size;
  }

  /** `judgedBefore`: verdicts already made (a reset's), taken as they are. */
  private add(leases: readonly Lease[], ranks?: Map<string, number>, judgedBefore?: ReadonlyMap<Lease, Verdict>): string[] {
    const skipped: string[] = [];
    for (const l of leases) {
      const v = judgedBefore?.get(l) ?? verdict(l, this.self, this.network, this.selfKey);
      this.judged.set(l, v);
      if (v === OURS || typeof v === 'string') {
        if (typeof v === 'string') skipped.push(v);
        continue;
      }
      this.byMac.add(v.mac, l);
      this.claims.add(l, v.subnet, v.key!, ranks?.get(v.key!));
      ranks?.delete(v.key!);
    }
    return skipped;
  }

  /** The peer of a lease the index holds as a candidate (one under its MAC or its subnet). */
  private peer(l: Lease): Peer {
    return this.judged.get(l) as Peer;
  }

  /** Others advertise its MAC for another PublicIP. */
  private disputed(l: Lease): boolean {
    const p = this.peer(l);
    const group = this.byMac.get(p.mac);
    if (group.length === 1) return false;
    for (const o of group) if (o !== l && this.peer(o).publicIP !== p.publicIP) return true;
    return false;
  }

  private macConflicts(group: readonly Lease[]): string[] {
    const out: string[] = [];
    for (const l of group) {
      const p = this.peer(l);
      const others = group.filter((o) => o !== l && this.peer(o).publicIP !== p.publicIP);
      if (others.length) out.push(macConflict(l, p.mac, others, this.data));
    }
    return out;
  }
}
