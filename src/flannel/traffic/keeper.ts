// The daemon's firewall rules, kept as flanneld keeps them: --ip-masq's
// masquerade rules and --iptables-forward-rules' FORWARD accepts, for each
// family of the overlay, in iptables or (EnableNFTables) nftables
// (traffic.ts). Put in place at start, checked again every --iptables-resync
// seconds (one listing per family and rule set when all is in place: nothing
// is changed), removed when the node leaves (--release-on-exit).
//
// At start, rules of ours that this run does not ask for go: those of the
// other backend (as flanneld clears the traffic manager it does not use),
// and those the flags or the config no longer ask for (--ip-masq or
// --iptables-forward-rules off, a family switched off). Nothing but our own
// chains, tables and jumps is ever touched.
import { Log, Reporter } from '../log';
import { ReconcileLoop } from '../../util/reconcile-loop';
import {
  ClusterNet,
  TrafficBackend,
  ensureForwardRules,
  ensureMasqRules,
  randomFullyUnsupported,
  removeForwardRules,
  removeMasqRules,
} from './rules';

export interface TrafficSettings {
  /** --ip-masq: masquerade what leaves the cluster network. */
  ipMasq: boolean;
  /** Fully random masquerading (flanneld's default; --ip-masq-fully-random-disable turns it off). */
  randomFully: boolean;
  /** --iptables-forward-rules: accept forwarding to and from the cluster network. */
  forwardRules: boolean;
  /** --iptables-resync, in ms. */
  resyncMs: number;
}

const FAMILIES = [4, 6] as const;
const other = (b: TrafficBackend): TrafficBackend => (b === 'iptables' ? 'nftables' : 'iptables');

export class TrafficKeeper {
  private readonly loop: ReconcileLoop;
  private readonly problems: Reporter;
  private backend: TrafficBackend = 'iptables';
  private nets: ClusterNet[] = [];
  private randomFully: boolean;
  private started = false;

  constructor(
    private readonly settings: TrafficSettings,
    private readonly log: Log,
  ) {
    this.randomFully = settings.randomFully;
    this.problems = new Reporter(log);
    this.loop = new ReconcileLoop(() => this.resync(), settings.resyncMs, async () => {});
  }

  /** What this run keeps, for the log: "IPv4 masquerade and forward rules (iptables), every 5 s", or undefined for none. */
  private describe(): string | undefined {
    const kinds = [...(this.settings.ipMasq ? ['masquerade'] : []), ...(this.settings.forwardRules ? ['forward'] : [])];
    if (!kinds.length || !this.nets.length) return undefined;
    const families = this.nets.map((n) => `IPv${n.network.family}`).join('+');
    return `${families} ${kinds.join(' and ')} rules (${this.backend}${this.settings.ipMasq && !this.randomFully ? ', masquerade not fully random' : ''}), checked every ${this.settings.resyncMs / 1000} s`;
  }

  /**
   * Removes the rules of ours this run does not ask for, then puts ours for
   * `nets` (one per family: the cluster network and this node's subnet) in
   * place with `backend` and keeps them from then on. Throws when the
   * masquerade rules cannot be put in place (--ip-masq was asked for and
   * FLANNEL_IPMASQ=true would leave pods unmasqueraded); forward rules that
   * cannot be (no iptables on the node) are reported and retried, as
   * flanneld only logs them.
   */
  async start(backend: TrafficBackend, nets: readonly ClusterNet[]): Promise<void> {
    this.backend = backend;
    this.nets = [...nets];
    await this.removeUnasked();
    if (this.settings.ipMasq && this.randomFully) {
      const why = await randomFullyUnsupported(backend);
      if (why) {
        this.randomFully = false;
        this.log(`masquerading without --random-fully, as flanneld would here: ${why}`);
      }
    }
    const changes = await this.masq();
    try {
      changes.push(...(await this.forward()));
    } catch (err) {
      this.problems.report('ensure', `cannot put the forward rules in place: ${(err as Error).message}; retrying every ${this.settings.resyncMs / 1000} s`);
    }
    for (const c of changes) this.log(`${c}: put in place`);
    this.started = true;
    const what = this.describe();
    if (what) {
      this.log(`keeping ${what}`);
      this.loop.startPeriodic();
    }
  }

  /** Stops the resync; resolves when a pass in progress has finished. The rules stay (as flanneld leaves them). */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** Removes every rule of ours of this backend (the node leaves); logs what went and what could not. */
  async remove(): Promise<void> {
    if (!this.started) return;
    await this.removeFrom(this.backend, [...FAMILIES], [...FAMILIES], 'the node leaves');
  }

  /** Our rules of each backend and kind that this run does not keep. */
  private async removeUnasked(): Promise<void> {
    const mine = this.nets.map((n) => n.network.family);
    const unless = (keep: boolean) => FAMILIES.filter((f) => !(keep && mine.includes(f)));
    await this.removeFrom(other(this.backend), [...FAMILIES], [...FAMILIES], `this run uses ${this.backend}`);
    await this.removeFrom(this.backend, unless(this.settings.ipMasq), unless(this.settings.forwardRules), 'not asked for');
  }

  private async removeFrom(backend: TrafficBackend, masq: (4 | 6)[], forward: (4 | 6)[], why: string): Promise<void> {
    for (const [kind, families, remove] of [
      ['masquerade', masq, removeMasqRules],
      ['forward', forward, removeForwardRules],
    ] as const) {
      if (!families.length) continue;
      try {
        for (const f of await remove(backend, families)) this.log(`removed our IPv${f} ${kind} rules (${backend}): ${why}`);
      } catch (err) {
        this.log(`cannot remove our ${kind} rules (${backend}): ${(err as Error).message}`);
      }
    }
  }

  /** Puts the masquerade rules in place if this run keeps them; returns what had to be changed. */
  private async masq(): Promise<string[]> {
    return this.settings.ipMasq ? ensureMasqRules(this.backend, this.nets, { randomFully: this.randomFully }) : [];
  }

  /** Puts the forward rules in place if this run keeps them; returns what had to be changed. */
  private async forward(): Promise<string[]> {
    return this.settings.forwardRules ? ensureForwardRules(this.backend, this.nets.map((n) => n.network)) : [];
  }

  /** Puts every rule this run keeps in place; returns what had to be changed. */
  private async ensure(): Promise<string[]> {
    return [...(await this.masq()), ...(await this.forward())];
  }

  /** One periodic pass: rules removed or changed by hand (or by another program) are put back. */
  private async resync(): Promise<void> {
    try {
      for (const c of await this.ensure()) this.log(`${c} had been changed or removed: put back`);
      this.problems.clear('ensure', 'firewall rules are in place again');
    } catch (err) {
      this.problems.report('ensure', `cannot keep the firewall rules: ${(err as Error).message}; retrying every ${this.settings.resyncMs / 1000} s`);
    }
  }
}
