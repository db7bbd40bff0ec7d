// The subnet manager over the Kubernetes API (flanneld --kube-subnet-mgr):
// leases are assigned. This node's subnets are its Node's spec.podCIDR(s)
// (kube-controller-manager's), what it advertises goes into its Node's
// annotations in flanneld's names and formats, the peers are the other Nodes
// that carry them, kept by a list + watch (as flanneld's informer), and the
// network config is a file (net-conf.json, kube-flannel's ConfigMap).
//
// Our Node is written through its status subresource only: kube-flannel's
// RBAC role allows `patch` on nodes/status and nothing else.
import { readFileSync } from 'node:fs';
import { IP, Prefix } from '../../net/ip';
import { Lease, LeaseAttrs, LeaseSubnets, describeSubnets, leaseKey } from '../lease';
import { Log, Reporter } from '../log';
import { HeldLease, LeaseDelta, LeaseHooks, LeaseList, StoreUnavailable, SubnetManager, Unwatch } from '../manager';
import { ConfigError, NetworkConfig, parseNetworkConfig } from '../netconfig';
import { FlannelAnnotations, annotationNames, leaseAnnotationNames, nodeLease, ownNodePatch, podSubnets } from './annotations';
import { KubeClient } from './client';
import { isObject } from './watch-stream';
import { KubeConfigOptions, KubeConnection, loadKubeConnection, verificationWarning } from './config';
import { networkDownPatch, networkUpPatch } from './network-condition';
import type { KubeNode } from './node';
import { Change, Informer, InformerOptions } from './informer';
import { NODES } from './resource';

export { DEFAULT_NET_CONF_PATH } from './config';

export interface KubeOptions extends KubeConfigOptions {
  /** This node's Node (NODE_NAME, --node-name); when empty, the node `pod` runs on. */
  nodeName: string;
  /** Our own pod (POD_NAMESPACE, POD_NAME), as kube-flannel.yml gives it: where to find the node name when none is given. */
  pod?: { namespace: string; name: string };
  /** --net-config-path */
  netConfPath: string;
  /** --kube-annotation-prefix */
  annotationPrefix: string;
  /** --set-node-network-unavailable: mark the Node's network up once the overlay is. */
  setNodeNetworkUnavailable: boolean;
}

/** How many lease changes the journal keeps (leaseChanges): a reader further behind lists instead. */
const JOURNAL_LIMIT = 20_000;

/** A Node's lease as read, or why it cannot be used (a lease has no `reason`): one object per Node kept, not a wrapper around it. */
type LeaseRead = Lease | { reason: string };

/** While our Node has no usable pod CIDR, the reason is logged again this often (it is logged at once when it changes). */
const WAIT_REMINDER_MS = 5 * 60_000;

/** net-conf.json's text; an Error naming the file when it cannot be read. */
export function readNetConf(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the network config ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/** What a Node's lease looks like to the daemon, for telling changes that matter from the rest (status, heartbeats). */
function signatureOf(r: LeaseRead | undefined): string {
  if (!r) return '';
  if ('reason' in r) return `bad: ${r.reason}`;
  const { attrs } = r;
  return JSON.stringify([leaseKey(r), attrs.backendType, attrs.publicIP?.toString(), attrs.publicIPv6?.toString(), attrs.vni, attrs.vtepMAC, attrs.v6Vni, attrs.v6VtepMAC]);
}

/**
 * The text of what nodeLease reads of a Node (its creation time, its pod
 * CIDRs, the annotations a lease is read from; the name is its key), as
 * short as it can be: it is kept per Node. Values only, in a fixed order;
 * podCIDRs `true` when it is [podCIDR], as the API writes them. Two
 * versions with the same text have the same lease. A kubelet's heartbeat
 * changes none of it, so its lease is not read again.
 */
function leaseInput(node: KubeNode, names: FlannelAnnotations): string {
  const a = node.metadata.annotations ?? {};
  const spec = node.spec ?? {};
  const cidrs = spec.podCIDRs;
  const sameAsPodCIDR = cidrs?.length === 1 && cidrs[0] === spec.podCIDR;
  return JSON.stringify([node.metadata.creationTimestamp ?? null, spec.podCIDR ?? null, sameAsPodCIDR || (cidrs ?? null), ...leaseAnnotationNames(names).map((k) => a[k] ?? null)]);
}

/**
 * The parts of a Node the daemon reads (its name, resourceVersion, creation
 * time, flannel's annotations, pod CIDRs): what the informer keeps of each while it reads
 * it, so that 5,000 kubelets' status (images, capacity, conditions), labels
 * and other annotations are not held in memory. `names`: the annotations
 * kept (all of them when absent). Only fields of the types the API promises
 * are kept: whatever else the server sends never reaches the code that reads
 * a lease.
 */
export function slimNode(node: KubeNode, names?: FlannelAnnotations): KubeNode {
  // Built field by field, without spreads: this runs for every event of the watch (kubelets' heartbeats).
  const meta: Record<string, unknown> = isObject(node.metadata) ? node.metadata : {};
  const metadata: KubeNode['metadata'] = { name: typeof meta.name === 'string' ? meta.name : '' };
  if (typeof meta.uid === 'string' && meta.uid) metadata.uid = meta.uid;
  if (typeof meta.resourceVersion === 'string' && meta.resourceVersion) metadata.resourceVersion = meta.resourceVersion;
  if (typeof meta.creationTimestamp === 'string' && meta.creationTimestamp) metadata.creationTimestamp = meta.creationTimestamp;
  if (isObject(meta.annotations)) {
    const all = meta.annotations;
    const annotations: Record<string, string> = {};
    for (const k of names ? annotationList(names) : Object.keys(all)) if (typeof all[k] === 'string') annotations[k] = all[k];
    metadata.annotations = annotations;
  }
  const slim: KubeNode = { metadata };
  if (isObject(node.spec)) {
    const { podCIDR, podCIDRs } = node.spec;
    const spec: NonNullable<KubeNode['spec']> = {};
    if (typeof podCIDR === 'string') spec.podCIDR = podCIDR;
    if (Array.isArray(podCIDRs)) spec.podCIDRs = podCIDRs.filter((c): c is string => typeof c === 'string');
    slim.spec = spec;
  }
  return slim;
}

/** flannel's annotation names as a list, made once per set of names (slimNode runs per event). */
const annotationLists = new WeakMap<FlannelAnnotations, readonly string[]>();
function annotationList(names: FlannelAnnotations): readonly string[] {
  let list = annotationLists.get(names);
  if (!list) annotationLists.set(names, (list = Object.values(names)));
  return list;
}

/** Whether `outer` holds all of `inner` (flanneld's containsCIDR). */
const holds = (outer: Prefix, inner: Prefix) => outer.length <= inner.length && outer.contains(inner.network);

/**
 * A client for the API the options name, and our Node's name: the one given,
 * else the node our own pod runs on (flanneld's lookup for kube-flannel.yml,
 * which sets POD_NAME and POD_NAMESPACE; a failure is fatal there too).
 */
export async function connect(o: KubeOptions): Promise<{ client: KubeClient; conn: KubeConnection; nodeName: string }> {
  if (!o.nodeName && !o.pod) throw new Error('--kube-subnet-mgr needs the name of this node\'s Node: set NODE_NAME or --node-name (or POD_NAME and POD_NAMESPACE)');
  annotationNames(o.annotationPrefix); // a prefix flannel refuses fails here, before anything is opened
  const conn = await loadKubeConnection(o);
  const client = new KubeClient(conn);
  if (o.nodeName) return { client, conn, nodeName: o.nodeName };
  const { namespace, name } = o.pod!;
  try {
    const nodeName = await client.podNodeName(namespace, name);
    if (!nodeName) throw new Error('it is not scheduled on a node (spec.nodeName is empty)');
    return { client, conn, nodeName };
  } catch (err) {
    client.close();
    throw new Error(`cannot find this node's name from pod ${namespace}/${name}: ${(err as Error).message}`);
  }
}

export class KubeManager implements SubnetManager {
  readonly description: string;
  readonly names: FlannelAnnotations;
  private readonly watch: Informer<KubeNode>;
  private synced = false;
  private lastError?: Error;
  /** Settles when the first list succeeded or failed: the first questions about our Node wait for it. */
  private readonly firstTry: Promise<void>;
  private firstTried?: () => void;
  /** Counts the changes that matter to the overlay: a list's revision. */
  private changes = 0;
  private onChange?: (why: string) => void;
  private onError?: (err: Error) => void;
  /** Wake the waits for our Node (acquireLease) at its next change. */
  private readonly wakeOnOwnChange = new Set<() => void>();
  private relistCount = 0;
  /** Per Node that is a flannel node: its lease (or why it is unusable) as last read, and the text it was read from (leaseInput). */
  private readonly leaseOf = new Map<string, { input: string; read: LeaseRead }>();
  /** The lease changes, in order: entry i is change number journalStart + i + 1 (`changes` counts them). */
  private readonly journal: { name: string; before?: LeaseRead; after?: LeaseRead }[] = [];
  private journalStart = 0;
  /** Watch troubles before the daemon watches (it reports them itself after). */
  private readonly early: Reporter;

  constructor(
    readonly client: KubeClient,
    readonly opts: Omit<KubeOptions, keyof KubeConfigOptions>,
    log: Log,
    watchOpts?: InformerOptions<KubeNode>,
  ) {
    this.names = annotationNames(opts.annotationPrefix);
    this.description = `Kubernetes API ${client.server}, node ${JSON.stringify(opts.nodeName)}`;
    this.early = new Reporter(log);
    this.firstTry = new Promise((resolve) => (this.firstTried = resolve));
    this.watch = new Informer<KubeNode>(
      client,
      NODES,
      {
        onChange: (c) => this.changed(c),
        onError: (err) => this.troubled(err),
        onRelist: (why) => {
          this.relistCount++;
          log(`listing every Node again: ${why}`);
        },
      },
      {
        keep: (n) => slimNode(n, this.names),
        // A peer's lease is read from its change (changed()) and kept in leaseOf: the cache needs only
        // its key, the name (a stub object per Node was ~0.3 MiB at 5,000). Not even its resourceVersion:
        // a new one per kubelet heartbeat, kept for 10 s, outlived the young generation (the old one
        // grew ~50 KB/s at 5,000 Nodes, toward a full collection every few minutes). A new list (after
        // 410 Gone) reports every peer as changed; changed() tells a lease unchanged at a heartbeat's cost.
        retain: (n) => (n.metadata.name === opts.nodeName ? n : undefined),
        ...watchOpts,
      },
    );
  }

  /**
   * Connects as the options say and starts listing and watching the Nodes in
   * the background: an unreachable API is retried then, never fatal here
   * (but for the pod lookup, when the node name has to come from the pod).
   */
  static async open(o: KubeOptions, log: Log): Promise<KubeManager> {
    const { client, conn, nodeName } = await connect(o);
    const m = new KubeManager(client, { ...o, nodeName }, log);
    log(`Kubernetes API: ${conn.description}${o.nodeName ? '' : `; node ${JSON.stringify(nodeName)}, where pod ${o.pod!.namespace}/${o.pod!.name} runs`}`);
    const warning = verificationWarning(conn);
    if (warning) log(warning);
    m.start();
    return m;
  }

  /** Starts the informer and returns at once; the first list is retried until it works. */
  start(): void {
    void this.watch.start().then(() => {
      this.synced = true;
      // The first list's leases are no change anyone asks for (no revision is handed out before
      // now): journaled, they would hold an entry per Node for as long as the journal lasts.
      this.journalStart = this.changes;
      this.journal.length = 0;
      this.firstTried?.();
      this.wakeOwnWaits();
    });
  }

  private changed(c: Change<KubeNode>): void {
    const name = c.key;
    if (name === this.opts.nodeName) this.wakeOwnWaits();
    // each Node's lease is read once per change and kept: heartbeats compare its input, lists copy leases
    const held = this.leaseOf.get(name);
    const node = c.type === 'DELETED' ? undefined : c.object;
    const input = node && leaseInput(node, this.names);
    if (held && held.input === input) return; // a heartbeat: the same lease
    const found = node && nodeLease(node, this.names);
    const read: LeaseRead | undefined = found && ('lease' in found ? found.lease : found);
    if (signatureOf(read) === signatureOf(held?.read)) {
      // the same lease told differently (or still none, another annotation): nothing for the backends to judge
      if (held) held.input = input!;
      return;
    }
    const entry = read ? { input: input!, read } : undefined;
    if (entry) this.leaseOf.set(name, entry);
    else this.leaseOf.delete(name);
    this.changes++;
    this.journal.push({ name, before: held?.read, after: entry?.read });
    if (this.journal.length > JOURNAL_LIMIT) {
      const drop = this.journal.length - JOURNAL_LIMIT / 2;
      this.journal.splice(0, drop);
      this.journalStart += drop;
    }
    this.onChange?.(`node ${JSON.stringify(name)} ${c.type === 'ADDED' ? 'added' : c.type === 'DELETED' ? 'deleted' : 'changed'}`);
  }

  private troubled(err: Error): void {
    if (!this.synced) this.lastError = err;
    this.firstTried?.();
    if (this.onError) this.onError(err);
    else this.early.report(err.message, `watching Nodes: ${err.message}`);
  }

  private wakeOwnWaits(): void {
    for (const wake of this.wakeOnOwnChange) wake();
    this.wakeOnOwnChange.clear();
  }

  /** Settles at our Node's next change (or the first list). */
  private ownChange(): Promise<void> {
    return new Promise((resolve) => this.wakeOnOwnChange.add(resolve));
  }

  private notSynced(): StoreUnavailable {
    const why = this.lastError ? `: ${this.lastError.message}` : '';
    return new StoreUnavailable(`${this.description}: no list of Nodes yet${why}`);
  }

  /** Our Node as last seen; StoreUnavailable before the first list, undefined when it does not exist. */
  ownNode(): KubeNode | undefined {
    if (!this.synced) throw this.notSynced();
    return this.watch.objects().get(this.opts.nodeName);
  }

  async getNetworkConfig(): Promise<NetworkConfig> {
    const path = this.opts.netConfPath;
    const text = readNetConf(path);
    try {
      return parseNetworkConfig(text);
    } catch (err) {
      if (err instanceof ConfigError) throw new Error(`bad network config in ${path}: ${err.message}`);
      throw err;
    }
  }

  async nodePublicIPs(): Promise<{ publicIp?: string; publicIpv6?: string }> {
    await this.firstTry; // asked right after the start: the first list is usually on its way
    // Not registered yet: nobody can have annotated it either (acquireLease waits for it, saying so).
    const a = this.ownNode()?.metadata.annotations ?? {};
    const read = (key: string, family: 4 | 6) => {
      if (!a[key]) return undefined;
      const ip = IP.parse(a[key]);
      if (ip?.family !== family) throw new Error(`annotation ${key} of node ${JSON.stringify(this.opts.nodeName)}: ${JSON.stringify(a[key])} is not an IPv${family} address`);
      return ip.toString();
    };
    const publicIp = read(this.names.nodePublicIP, 4);
    const publicIpv6 = read(this.names.nodePublicIPv6, 6);
    return { ...(publicIp ? { publicIp } : {}), ...(publicIpv6 ? { publicIpv6 } : {}) };
  }

  /** The VTEPs our Node advertised (flanneld's GetStoredMacAddresses): kept when the devices are made again. */
  async previousAttrs(): Promise<LeaseAttrs | undefined> {
    const node = this.ownNode();
    const r = node && nodeLease(node, this.names);
    return r && 'lease' in r ? r.lease.attrs : undefined;
  }

  async acquireLease(cfg: NetworkConfig, attrs: LeaseAttrs, hooks: LeaseHooks): Promise<HeldLease> {
    const { node, subnets, field } = await this.assignedSubnets(cfg, hooks);
    const patch = ownNodePatch(node, attrs, this.names);
    if (patch) {
      await this.client.patchNode(this.opts.nodeName, patch, { status: true });
      hooks.log(`annotated node ${JSON.stringify(this.opts.nodeName)}: ${Object.keys(patch.metadata.annotations).join(', ')}`);
    }
    return new KubeLease(this, subnets, `node ${JSON.stringify(this.opts.nodeName)}'s ${field}`, attrs, node.metadata.resourceVersion, hooks);
  }

  /**
   * Waits until our Node has a pod CIDR for every family the network config
   * enables, inside its network. Never invents one: the reason is logged
   * when it changes (and every few minutes while it lasts) and the wait goes
   * on until the Node changes or the daemon stops.
   */
  private async assignedSubnets(cfg: NetworkConfig, hooks: LeaseHooks): Promise<{ node: KubeNode; subnets: LeaseSubnets; field: string }> {
    const waiting = new Reporter(hooks.log);
    for (;;) {
      const next = this.ownChange();
      const r = this.synced ? this.usableSubnets(cfg) : { wait: this.notSynced().message };
      if (!('wait' in r)) return r;
      waiting.report('wait', `waiting for node ${JSON.stringify(this.opts.nodeName)}: ${r.wait}`);
      let timer: NodeJS.Timeout | undefined;
      const remind = new Promise<'remind'>((resolve) => (timer = setTimeout(() => resolve('remind'), WAIT_REMINDER_MS)));
      const outcome = await Promise.race([next.then(() => 'changed' as const), remind, ...(hooks.stopping ? [hooks.stopping.then(() => 'stopped' as const)] : [])]);
      clearTimeout(timer);
      if (outcome === 'stopped') throw new Error(`stopped while waiting for node ${JSON.stringify(this.opts.nodeName)}`);
      if (outcome === 'remind') waiting.clear('wait'); // logged again: still waiting
    }
  }

  /** Our Node's subnets for the config's families, or why there are none (yet). */
  private usableSubnets(cfg: NetworkConfig): { node: KubeNode; subnets: LeaseSubnets; field: string } | { wait: string } {
    const node = this.watch.objects().get(this.opts.nodeName);
    if (!node) return { wait: 'it does not exist (yet): waiting for the kubelet to register it' };
    let assigned: LeaseSubnets;
    try {
      assigned = podSubnets(node);
    } catch (err) {
      return { wait: `${(err as Error).message}; kube-controller-manager assigns it (--allocate-node-cidrs)` };
    }
    const field = node.spec?.podCIDRs?.length ? 'spec.podCIDRs' : 'spec.podCIDR';
    const subnets: LeaseSubnets = {};
    for (const [family, pool, subnet] of [[4, cfg.v4, assigned.subnet], [6, cfg.v6, assigned.ipv6Subnet]] as const) {
      if (!pool) continue; // a family the config does not enable is not ours to use, as in flanneld
      if (!subnet) return { wait: `${field} has no IPv${family} CIDR, but the network config enables IPv${family}` };
      if (!holds(pool.network, subnet)) return { wait: `its IPv${family} pod CIDR ${subnet} is not inside the network config's ${pool.network}` };
      subnets[family === 4 ? 'subnet' : 'ipv6Subnet'] = subnet;
    }
    return { node, subnets, field };
  }

  /** Every Node that is a flannel node, as a lease (the informer's cache). */
  async listLeases(): Promise<LeaseList> {
    if (!this.synced) throw this.notSynced();
    return this.snapshot();
  }

  snapshot(): LeaseList {
    const list: LeaseList = { leases: [], bad: [], revision: String(this.changes) };
    for (const name of this.watch.objects().keys()) {
      const read = this.leaseOf.get(name)?.read;
      if (!read) continue;
      if ('reason' in read) list.bad.push({ key: `nodes/${name}`, why: read.reason });
      else list.leases.push(read);
    }
    return list;
  }

  /** The lease changes after revision `revision` (a count of changes), from the journal; undefined when it no longer holds them all. */
  leaseChanges(revision: string): LeaseDelta | undefined {
    const from = Number(revision);
    if (!this.synced || !Number.isSafeInteger(from) || from < this.journalStart || from > this.changes) return undefined;
    // The daemon, the one reader, asks from the revision it was given last: what lies before `from`
    // is never asked for again (a revision older still gets undefined: the reader lists), so the
    // journal does not hold the leases changes replaced for thousands of changes.
    this.journal.splice(0, from - this.journalStart);
    this.journalStart = from;
    const delta: LeaseDelta = { removed: [], added: [], bad: [], revision: String(this.changes) };
    const removed = new Set<Lease>();
    const added = new Set<Lease>();
    for (let i = from - this.journalStart; i < this.journal.length; i++) {
      const { name, before, after } = this.journal[i];
      // a lease added and removed again within the window cancels out
      if (before && !('reason' in before) && !added.delete(before)) removed.add(before);
      if (after && !('reason' in after)) added.add(after);
      if (after && 'reason' in after) delta.bad.push({ key: `nodes/${name}`, why: after.reason });
    }
    delta.removed = [...removed];
    delta.added = [...added];
    return delta;
  }

  /**
   * The informer's changes that matter (a Node's lease added, changed or
   * gone), from `after` (a snapshot's revision: changes made since are
   * reported at once).
   */
  watchLeases(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): Unwatch {
    this.onChange = onChange;
    this.onError = onError;
    if (after !== undefined && after !== String(this.changes)) onChange('Nodes changed since the list');
    return () => {
      this.onChange = undefined;
      this.onError = undefined;
    };
  }

  async tidy(): Promise<void> {}

  relists(): number {
    return this.relistCount;
  }

  async close(): Promise<void> {
    this.watch.stop();
    this.client.close();
  }
}

/** Our Node's pod CIDRs, held: the annotations kept as we wrote them, the Node's network marked up. */
class KubeLease implements HeldLease {
  readonly subnet?: Prefix;
  readonly ipv6Subnet?: Prefix;
  readonly listed: LeaseList;
  private readonly problems: Reporter;
  private readonly log: Log;
  /** The resourceVersion of our Node our last patch was made from: the check waits for a newer one. */
  private patchedFrom?: string;
  /** The NetworkUnavailable condition last patched: undefined before the first patch (whatever the Node had stays until then). */
  private marked?: 'up' | 'down';

  constructor(
    private readonly manager: KubeManager,
    subnets: LeaseSubnets,
    readonly how: string,
    private readonly attrs: LeaseAttrs,
    patchedFrom: string | undefined,
    hooks: LeaseHooks,
  ) {
    this.subnet = subnets.subnet;
    this.ipv6Subnet = subnets.ipv6Subnet;
    this.listed = manager.snapshot();
    this.log = hooks.log;
    this.problems = new Reporter(hooks.log);
    this.patchedFrom = patchedFrom;
  }

  private get nodeName(): string {
    return this.manager.opts.nodeName;
  }

  /** Our Node must still carry our annotations: written again when someone changed or removed them. Never lists again. */
  async check(): Promise<boolean> {
    const node = this.manager.ownNode();
    const name = JSON.stringify(this.nodeName);
    if (!node) {
      this.problems.report('node', `node ${name} is gone from ${this.manager.description}; the overlay stays as it is`);
      return false;
    }
    this.problems.clear('node', `node ${name} is back`);
    let now: LeaseSubnets | undefined;
    try {
      now = podSubnets(node);
    } catch {
      now = undefined;
    }
    const same = (a?: Prefix, b?: Prefix) => !a || a.toString() === b?.toString();
    if (!now || !same(this.subnet, now.subnet) || !same(this.ipv6Subnet, now.ipv6Subnet)) {
      const theirs = now ? describeSubnets(now) : 'none';
      this.problems.report('cidr', `node ${name} now has pod CIDRs ${theirs}, this daemon holds ${describeSubnets(this)}: restart it to follow`);
      return false;
    }
    this.problems.clear('cidr');
    if (node.metadata.resourceVersion === this.patchedFrom) return false; // our patch is on its way through the watch
    const patch = ownNodePatch(node, this.attrs, this.manager.names);
    if (!patch) return false;
    try {
      await this.manager.client.patchNode(this.nodeName, patch, { status: true });
      this.patchedFrom = node.metadata.resourceVersion;
      this.problems.clear('patch');
      this.log(`node ${name}: ${Object.keys(patch.metadata.annotations).join(', ')} had been changed: written again`);
    } catch (err) {
      this.problems.report('patch', `cannot write node ${name}'s annotations: ${(err as Error).message}; retrying on each reconcile`);
    }
    return false;
  }

  async overlayState(problem: string | undefined): Promise<void> {
    const want = problem === undefined ? 'up' : 'down';
    if (this.marked === want || !this.manager.opts.setNodeNetworkUnavailable) return;
    const now = new Date();
    await this.manager.client.patchNode(this.nodeName, problem === undefined ? networkUpPatch(now) : networkDownPatch(now, problem), { status: true });
    this.marked = want;
    this.log(`node ${JSON.stringify(this.nodeName)}: condition NetworkUnavailable set to ${problem === undefined ? 'False (FlannelIsUp)' : `True (FlannelIsNotReady: ${problem})`}`);
  }

  stop(): void {}

  /** The node leaves the overlay: flannel's annotations come off our Node, so the other nodes drop it. */
  async release(): Promise<void> {
    const n = this.manager.names;
    const keys = [n.kubeSubnetManager, n.backendType, n.backendData, n.backendV6Data, n.publicIP, n.publicIPv6];
    await this.manager.client.patchNode(this.nodeName, { metadata: { annotations: Object.fromEntries(keys.map((k) => [k, null])) } }, { status: true });
  }

  /** The annotations stay: the pod CIDR is the Node's whatever this start did. */
  async abandon(): Promise<void> {}
}
