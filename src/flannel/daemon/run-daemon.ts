// `vxlan-flannel daemon` as a process: opens the subnet manager the flags ask
// for, serves /healthz, /readyz and /metrics when asked (healthz.ts, metrics.ts), runs the daemon
// (and, with --network-policy, the policy controller: policy/controller.ts, loaded only then)
// until SIGTERM or SIGINT, and says how to exit. Log lines go to stderr as
// `<RFC 3339 time> vxlan-flannel: <message>`.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { readIfExists } from '../../util/fs';
import { batchSessions } from '../../iproute/batch-session';
import { currentRunner, setRunner } from '../../iproute/exec';
import { Daemon, DaemonOptions } from './daemon';
import { setDaemonV8Flags } from './v8-flags';
import { DaemonMetrics } from './metrics';
import type { KubeManager, KubeOptions } from '../kube/kube-manager';
import type { PolicyController } from '../policy/controller';
import { TABLE as POLICY_TABLE, removeTable as removePolicyTable } from '../policy/table';
import type { Family } from '../../net/ip';
import type { LeaseSubnets } from '../lease';
import { Log, printable } from '../log';
import type { SubnetManager } from '../manager';
import { openStore } from '../store/open-store';
import type { StoreOptions } from '../store/store';
import { StoreManager } from '../store/store-manager';
import { parseSubnetEnv, subnetsOf } from '../subnet-env';
import { utcIso } from '../../util/utc-time';

export interface RunOptions extends Omit<DaemonOptions, 'log'> {
  store: StoreOptions;
  /** --kube-subnet-mgr: leases are the Nodes' pod CIDRs (the store options are then not used). */
  kube?: KubeOptions;
  /** Lifetime of our lease in seconds (--lease-ttl). */
  leaseTtlS: number;
  /** Renew the lease this long before it expires, in seconds (--subnet-lease-renew-margin). */
  renewMarginS?: number;
  /** Where /healthz and /readyz listen (--healthz-ip, --healthz-port); none when absent. */
  healthz?: { ip: string; port: number };
  /** host-local's data directory (--ipam-data-dir), read for flannel_pod_addresses. */
  ipamDir?: string;
  /** Log lines without their time (klog's --skip_headers). */
  skipHeaders?: boolean;
  /** Lines logged first (flags accepted that change nothing here). */
  notes?: readonly string[];
  /** --network-policy (with --kube-subnet-mgr): enforce NetworkPolicy for this node's pods. */
  networkPolicy?: boolean;
}

/** Log lines on stderr: `<RFC 3339 time> vxlan-flannel: <message>`, or without the time. */
const stderrLog = (skipHeaders: boolean): Log => (msg) =>
  process.stderr.write(`${skipHeaders ? '' : `${utcIso(Date.now())} `}vxlan-flannel: ${printable(msg)}\n`);

/** The subnets of the previous subnet.env: a node that lost its lease gets them back when they are still free. */
function previousSubnets(subnetFile: string): LeaseSubnets | undefined {
  try {
    const text = readIfExists(subnetFile);
    return text === undefined ? undefined : subnetsOf(parseSubnetEnv(text));
  } catch {
    return undefined; // unreadable: nothing to go back to
  }
}

/**
 * A full pass reads the kernel's tables (three JSON listings of every peer's
 * entries: megabytes at 5,000 peers) and plans against them; the garbage
 * outlives the young generation (the pass awaits its commands) and V8 keeps
 * the old generation it grew for it. A full collection right after the pass
 * (on the next turn, not inside it) gives it back: measured at 5,000 Nodes,
 * ~20 MiB less RSS for ~50-100 ms of CPU per full pass (docs/speed.md). The
 * "last resort" kind also shrinks the young generation and compacts pages:
 * full passes are rare now, and it took 1.7-2 MiB more off an idle daemon
 * (10 Nodes: 58.4 -> 57.8 MiB with Kubernetes, 59.9 -> 58.0 with etcd; 5,000
 * Nodes: 79.0 -> 77.3, "Footprint"). A Node without that kind does a plain one.
 */
function compactAfterFullPasses(): () => void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as ((o?: object) => void) | undefined;
  setFlagsFromString('--no-expose-gc');
  let pending: NodeJS.Immediate | undefined;
  return () => {
    if (!gc || pending) return;
    pending = setImmediate(() => {
      pending = undefined;
      gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    });
  };
}

/** Leases assigned by Kubernetes with --kube-subnet-mgr; else chosen in the store the flags name: etcd with --etcd-endpoints, else the file store. */
async function openManager(o: RunOptions, log: Log): Promise<SubnetManager> {
  // each source's client is loaded only when asked for: a daemon on a store never loads the Kubernetes client (https, tls)
  if (o.kube) return (await import('../kube/kube-manager')).KubeManager.open(o.kube, log);
  return new StoreManager(await openStore(o.store), { leaseTtlS: o.leaseTtlS, renewMarginS: o.renewMarginS, previous: previousSubnets(o.subnetFile) });
}

/**
 * --network-policy: the policy controller on the manager's connection, for
 * the overlay's families (both when net-conf.json cannot be read yet: the
 * daemon says why). Without the flag, a table a previous run left is removed:
 * dropping the flag turns enforcement off; nothing else of policy is loaded.
 */
async function startPolicy(o: RunOptions, manager: SubnetManager, log: Log): Promise<PolicyController | undefined> {
  if (!o.networkPolicy) {
    await removePolicyTable().then(
      (removed) => removed && log(`removed the nftables table inet ${POLICY_TABLE}: --network-policy is off`),
      (err) => log(`cannot remove the nftables table inet ${POLICY_TABLE} (--network-policy is off): ${(err as Error).message}`),
    );
    return undefined;
  }
  const kube = manager as KubeManager;
  let families: Family[] = [4, 6];
  try {
    const cfg = await kube.getNetworkConfig();
    families = [...(cfg.v4 ? [4 as const] : []), ...(cfg.v6 ? [6 as const] : [])];
  } catch {
    // the daemon retries and logs it; both families meanwhile
  }
  const { PolicyController } = await import('../policy/controller');
  const policy = new PolicyController({ client: kube.client, nodeName: kube.opts.nodeName, families, log, resyncMs: o.reconcileMs });
  policy.start();
  return policy;
}

/**
 * Runs the daemon until SIGTERM or SIGINT; resolves with the exit code: 0
 * after a stop, 1 when it could not start (or stop). A signal during start-up
 * stops it at its next step.
 */
export async function runDaemon(o: RunOptions): Promise<number> {
  setDaemonV8Flags(); // (the standalone executable set them before anything was compiled)
  const afterFullPass = compactAfterFullPasses();
  // The peers' batches go to an ip and a bridge kept running, not a process forked per batch (batch-session.ts).
  const sessions = batchSessions(currentRunner());
  setRunner(sessions.runner);
  const log = stderrLog(!!o.skipHeaders);
  // The last resort, for a bug of ours: one log line with the stack, not Node's report, which quotes the
  // source line the error came from (the whole minified bundle, ~24 KB). The process still exits: what
  // threw left its state unknown, and the kubelet or systemd starts a clean one (the kernel state stays).
  process.on('uncaughtException', (err) => {
    log(`fatal: unexpected error: ${err instanceof Error ? err.stack : String(err)}`);
    process.exit(70);
  });
  for (const note of o.notes ?? []) log(note);
  if (o.networkPolicy && !o.kube) {
    log('fatal: --network-policy needs --kube-subnet-mgr (the policies, pods and namespaces are read from the Kubernetes API)');
    return 1;
  }
  let manager: SubnetManager;
  try {
    manager = await openManager(o, log);
  } catch (err) {
    log(`fatal: ${(err as Error).message}`);
    return 1;
  }
  const metrics = new DaemonMetrics({ relists: () => manager.relists?.() ?? 0, ipamDir: o.ipamDir });
  const daemon = new Daemon(manager, { ...o, log, metrics, afterFullPass });
  const policy = await startPolicy(o, manager, log);
  if (policy) metrics.add(() => policy.metrics.families());
  // /readyz: the overlay first, then policy enforcement
  const health = { live: () => daemon.live(), ready: () => daemon.ready() ?? policy?.ready() };
  let closeHealth = async () => {};
  if (o.healthz) {
    try {
      closeHealth = (await (await import('./healthz')).serveHealth(o.healthz, health, metrics)).close;
      const everywhere = o.healthz.ip === '0.0.0.0' || o.healthz.ip === '::';
      // flanneld's default address too; said here because the endpoints answer anyone who can reach them
      log(`serving /healthz, /readyz and /metrics on ${o.healthz.ip.includes(':') ? `[${o.healthz.ip}]` : o.healthz.ip}:${o.healthz.port}${everywhere ? ' (every address of this node, without authentication: --healthz-ip narrows it)' : ''}`);
    } catch (err) {
      log(`fatal: cannot serve /healthz on ${o.healthz.ip} port ${o.healthz.port}: ${(err as Error).message}`);
      await policy?.stop();
      await manager.close().catch(() => {});
      return 1;
    }
  }
  // before the daemon closes the connection they share; the table goes only when the node leaves
  const stopPolicy = async () => {
    await policy?.stop();
    if (o.releaseOnExit) await policy?.remove().catch((err) => log(`cannot remove the nftables table inet ${POLICY_TABLE}: ${(err as Error).message}`));
  };
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      log(`${signal}: stopping${o.releaseOnExit ? ' and releasing the lease' : ` (the lease, VTEP, routes and firewall rules${policy ? ' and the network policy table' : ''} stay for the next start)`}`);
      stopPolicy().then(() => daemon.stop()).finally(closeHealth).finally(sessions.close).then(
        () => resolve(0),
        (err) => {
          log(`stop failed: ${(err as Error).message}`);
          resolve(1);
        },
      );
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    daemon.start().catch(async (err) => {
      if (stopping) return; // stopped while starting: stop() resolves
      log(`fatal: ${(err as Error).message}`);
      await policy?.stop();
      await daemon.stop().catch(() => {});
      await closeHealth();
      resolve(1);
    });
  });
}
