// Keeps this node's lease in a lease store while the daemon runs (the
// HeldLease of store-manager.ts): renews it on its own timer, checks it
// against every fresh list, gives it back on request.
//
// - Renewal: `min(margin, TTL/2)` before expiry (the margin is flanneld's
//   --subnet-lease-renew-margin, an hour by default), derived from the TTL
//   alone, so a short TTL with a long reconcile interval never lets the lease
//   lapse; a failed renewal is retried every tenth of that (1 s to 1 min). Guarded by the
//   value as last seen in the store: a lease that now holds another node's
//   data is not overwritten.
// - Reservations (flannel's: no TTL) are never renewed, and re-written
//   without a TTL.
// - Writes of the lease (renewal, re-creation, release) run one at a time:
//   two renewals interleaving in etcd could revoke the etcd lease the key had
//   just been moved to, deleting our live lease.
import type { Prefix } from '../../net/ip';
import { Serial } from '../../util/serial';
import { Acquired, identity } from './acquire';
import { Lease, LeaseAttrs, LeaseSubnets, describeSubnets, encodeAttrs, sameSubnets } from '../lease';
import { Reporter } from '../log';
import type { HeldLease, LeaseHooks, LeaseList } from '../manager';
import type { NetworkConfig } from '../netconfig';
import type { LeaseStore } from './store';

/** flanneld's --subnet-lease-renew-margin default: an hour. */
export const DEFAULT_RENEW_MARGIN_S = 3600;
/** Seconds before expiry at which a lease is renewed: the margin (an hour for flannel's 24 h), half the TTL for short ones. */
export const renewMarginS = (ttlS: number, marginS = DEFAULT_RENEW_MARGIN_S) => Math.min(marginS, ttlS / 2);
/** How soon a renewal that failed is tried again: a tenth of the margin, from 1 s to 1 min. */
export const renewRetryMs = (ttlS: number, marginS = DEFAULT_RENEW_MARGIN_S) => Math.min(60_000, Math.max(1000, renewMarginS(ttlS, marginS) * 100));

export class LeaseKeeper implements HeldLease {
  readonly subnet?: Prefix;
  readonly ipv6Subnet?: Prefix;
  readonly how: string;
  readonly listed: LeaseList;
  private readonly subnets: LeaseSubnets;
  /** The lease was created by this acquisition (not reused): abandon() deletes it. */
  private readonly created: boolean;
  /** Our lease's value as last seen in the store (or as we wrote it): what a renewal is guarded by. */
  private value: string;
  /** A reservation (no TTL, as flannel keeps them): never renewed, re-written without a TTL. */
  private reservation: boolean;
  private renewAt = 0;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private readonly writes = new Serial();
  private readonly problems: Reporter;

  constructor(
    private readonly store: LeaseStore,
    private readonly cfg: NetworkConfig,
    private readonly ttlS: number,
    /** --subnet-lease-renew-margin, in seconds. */
    private readonly marginS: number,
    private readonly attrs: LeaseAttrs,
    acquired: Acquired,
    private readonly hooks: LeaseHooks,
  ) {
    this.subnet = acquired.subnet;
    this.ipv6Subnet = acquired.ipv6Subnet;
    this.subnets = { subnet: acquired.subnet, ipv6Subnet: acquired.ipv6Subnet };
    this.reservation = !!acquired.permanent;
    this.how = `${acquired.how}${this.reservation ? ', a reservation: kept without a TTL' : ''}`;
    this.created = acquired.how !== 'reused';
    this.listed = acquired.listed;
    this.value = acquired.value;
    this.problems = new Reporter(hooks.log);
    this.written();
    this.arm();
  }

  private get name(): string {
    return describeSubnets(this.subnets);
  }

  /** The lease was just written with a fresh TTL. */
  private written(): void {
    this.renewAt = Date.now() + (this.ttlS - renewMarginS(this.ttlS, this.marginS)) * 1000;
  }

  /** Arms the renewal timer (at renewAt, or after `delayMs`); a reservation is never renewed. */
  private arm(delayMs = this.renewAt - Date.now()): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.stopped || this.reservation) return;
    this.timer = setTimeout(() => void this.renew(), Math.max(0, Math.min(delayMs, 2 ** 31 - 1)));
  }

  private renew(): Promise<void> {
    return this.writes.run(async () => {
      if (this.stopped || this.reservation) return;
      const retryMs = renewRetryMs(this.ttlS, this.marginS);
      try {
        if (!(await this.store.renew(this.subnets, this.attrs, this.ttlS, this.value))) {
          this.problems.report('renew', `cannot renew lease ${this.name}: it now holds another node's data`);
          this.hooks.resync('lease renewal refused'); // the reconcile looks at what it holds now
          this.arm(retryMs);
          return;
        }
        this.value = encodeAttrs(this.attrs);
        this.written();
        this.problems.clear('renew');
        this.hooks.log(`renewed lease ${this.name} for ${this.ttlS} s`);
        this.hooks.renewed?.();
        this.arm();
      } catch (err) {
        this.problems.report('renew', `cannot renew lease ${this.name}: ${(err as Error).message}; retrying every ${retryMs / 1000} s`);
        this.arm(retryMs);
      }
    });
  }

  /** Our lease must still be ours: written again if it vanished (deleted by hand, expired while the store was down) or changed. */
  async check(leases: readonly Lease[]): Promise<boolean> {
    const ours = leases.find((l) => sameSubnets(l, this.subnets));
    const mine = encodeAttrs(this.attrs);
    if (ours && encodeAttrs(ours.attrs) === mine) {
      // ours, whatever its spelling: the next renewal is guarded by the value as stored
      this.value = ours.raw ?? mine;
      if (this.reservation !== !!ours.permanent) {
        this.reservation = !!ours.permanent; // an operator turned it into a reservation, or back
        this.arm();
      }
      return false;
    }
    const me = identity(this.cfg, this.attrs)!;
    const holder = ours && identity(this.cfg, ours.attrs);
    if (ours && !holder?.equals(me)) {
      this.problems.report('conflict', `CONFLICT: subnet ${this.name} is now leased by ${holder ?? ours.attrs.publicIP ?? ours.attrs.publicIPv6}; leaving it alone`);
      return false;
    }
    const ok = await this.writes.run(() =>
      ours
        ? this.store.renew(this.subnets, this.attrs, ours.permanent ? 0 : this.ttlS, ours.raw ?? encodeAttrs(ours.attrs))
        : this.store.create(this.subnets, this.attrs, this.ttlS),
    );
    if (!ok) {
      if (!ours) this.problems.report('conflict', `CONFLICT: lease ${this.name} is gone from the store and another lease now holds one of its subnets; leaving it alone`);
      return false;
    }
    this.value = mine;
    this.reservation = !!ours?.permanent; // a reservation re-written stays one; a re-created lease has a TTL
    this.written();
    this.arm();
    this.hooks.log(`lease ${this.name} was ${ours ? 'changed' : 'gone'} in the store: written again`);
    return true;
  }

  /** Nothing to tell a store. */
  async overlayState(): Promise<void> {}

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async release(): Promise<void> {
    this.stop();
    await this.writes.run(() => this.store.remove(this.subnets)); // after a renewal in flight, never beside it
  }

  async abandon(): Promise<void> {
    this.stop();
    if (this.created) await this.writes.run(() => this.store.remove(this.subnets)).catch(() => {});
  }
}
