// The peers one VTEP wants, kept lease by lease: a changes pass hands in the
// leases that left and came (a changed lease is both), and learns which
// peer subnets may want something else now, without looking at the other
// leases. The same rules as desiredPeers (peers.ts): each lease is judged
// once (the memo), and leases advertising one VTEP MAC for different
// PublicIPs are all skipped; so only the leases sharing a MAC with a changed
// one are looked at again. Two leases on one subnet (a misconfiguration):
// the one that came last is wanted.
import type { Lease } from '../../lease';
import type { Prefix } from '../../../net/ip';
import { OURS, type Peer, type PeerMemo, type Self, macConflict, verdict } from './peers';

export class PeerIndex {
  /** Every lease in the index, with its verdict. */
  private readonly judged = new Map<Lease, Peer | undefined>();
  /** Candidate peers by VTEP MAC and by subnet key. */
  private readonly byMac = new Map<string, Set<Lease>>();
  private readonly byKey = new Map<string, Set<Lease>>();
  private readonly selfKey: string;
  private readonly data: string;

  constructor(
    private readonly self: Self,
    private readonly network: Prefix,
    private readonly memo: PeerMemo,
  ) {
    this.selfKey = self.subnet.toString();
    this.data = network.family === 6 ? 'BackendV6Data' : 'BackendData';
  }

  /** The index of exactly `leases`: every peer they want, and why the others are skipped. */
  reset(leases: readonly Lease[]): { peers: Peer[]; skipped: string[] } {
    this.judged.clear();
    this.byMac.clear();
    this.byKey.clear();
    const skipped = this.add(leases);
    const peers: Peer[] = [];
    for (const key of this.byKey.keys()) {
      const p = this.wanted(key);
      if (p) peers.push(p);
    }
    for (const leasesOfMac of this.byMac.values()) if (leasesOfMac.size > 1) skipped.push(...this.conflicts(leasesOfMac));
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
   * wanted peer may differ now (those of the leases changed and of the
   * leases sharing a MAC with them), and why added leases are skipped.
   */
  apply(removed: readonly Lease[], added: readonly Lease[]): { keys: Set<string>; skipped: string[] } {
    const keys = new Set<string>();
    const macs = new Set<string>();
    for (const l of removed) {
      const p = this.judged.get(l);
      this.judged.delete(l);
      if (!p) continue;
      this.unlink(this.byMac, p.mac, l);
      this.unlink(this.byKey, p.key!, l);
      keys.add(p.key!);
      macs.add(p.mac);
    }
    const skipped = this.add(added);
    for (const l of added) {
      const p = this.judged.get(l);
      if (!p) continue;
      keys.add(p.key!);
      macs.add(p.mac);
    }
    for (const mac of macs) {
      const group = this.byMac.get(mac);
      if (!group) continue;
      for (const l of group) keys.add(this.judged.get(l)!.key!);
      if (group.size > 1) skipped.push(...this.conflicts(group));
    }
    return { keys, skipped };
  }

  /** The peer wanted on subnet `key`: the last lease there whose MAC is not disputed. */
  wanted(key: string): Peer | undefined {
    const there = this.byKey.get(key);
    if (!there) return undefined;
    let found: Peer | undefined;
    for (const l of there) if (!this.disputed(l)) found = this.judged.get(l);
    return found;
  }

  /** How many leases the index holds. */
  get size(): number {
    return this.judged.size;
  }

  private add(leases: readonly Lease[]): string[] {
    const skipped: string[] = [];
    for (const l of leases) {
      let v = this.memo.get(l);
      if (v === undefined) {
        v = verdict(l, this.self, this.network, this.selfKey);
        this.memo.set(l, v);
      }
      if (v === OURS || typeof v === 'string') {
        this.judged.set(l, undefined);
        if (typeof v === 'string') skipped.push(v);
        continue;
      }
      this.judged.set(l, v);
      this.link(this.byMac, v.mac, l);
      this.link(this.byKey, v.key!, l);
    }
    return skipped;
  }

  /** Others advertise its MAC for another PublicIP. */
  private disputed(l: Lease): boolean {
    const p = this.judged.get(l)!;
    const group = this.byMac.get(p.mac)!;
    if (group.size === 1) return false;
    for (const o of group) if (o !== l && this.judged.get(o)!.publicIP !== p.publicIP) return true;
    return false;
  }

  private conflicts(group: ReadonlySet<Lease>): string[] {
    const out: string[] = [];
    for (const l of group) {
      const p = this.judged.get(l)!;
      const others = [...group].filter((o) => o !== l && this.judged.get(o)!.publicIP !== p.publicIP);
      if (others.length) out.push(macConflict(l, p.mac, others, this.data));
    }
    return out;
  }

  private link(m: Map<string, Set<Lease>>, k: string, l: Lease): void {
    const s = m.get(k);
    if (s) s.add(l);
    else m.set(k, new Set([l]));
  }

  private unlink(m: Map<string, Set<Lease>>, k: string, l: Lease): void {
    const s = m.get(k);
    if (!s) return;
    s.delete(l);
    if (!s.size) m.delete(k);
  }
}
