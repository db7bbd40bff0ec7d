// `host-local repair`: releases what containers the runtime no longer knows
// left on this node (a power loss, a lost DEL), by running each network's CNI
// GC through its own plugins, as libcni's GC does, with the live sandboxes as
// the valid attachments.
//
//   1. Ask the runtime over CRI which pod sandboxes exist. A runtime that does
//      not answer is an error (CriError), never "no pods".
//   2. Read the networks the runtime runs (its conf dir, as it loads them) and
//      what each holds on disk (inventory.ts).
//   3. Decide what is stale (plan.ts): not a listed sandbox's, and older than
//      the runtime's answer by `minAgeMs`.
//   4. For each network with something stale: its GC (gc-network.ts) with
//      the stale attachments named (cni-ts.dev/stale-attachments), so our
//      plugins release exactly those; then read the state again and report
//      what is gone. A dry run stops before anything changes.
import { readConfDir, type NetworkConfigList } from '../libcni/conf-dir';
import { validateNetworkName } from '../cni/config';
import { gcNetwork } from '../libcni/gc-network';
import { CriClient } from '../runtime/cri';
import { attachmentKey, readInventory, type NetworkInventory } from './inventory';
import { planRepair, type NetworkPlan } from './plan';

export interface RepairOptions {
  /** The runtime's CRI endpoint: unix:///path/to.sock or an absolute socket path. */
  runtimeEndpoint: string;
  confDir: string;
  /** Where the networks' plugins are (CNI_PATH). */
  binDirs: string[];
  /** libcni's cache directory. */
  cacheDir: string;
  /** How many network configs the runtime loads, in file name order (containerd's max_conf_num; 0: all). */
  maxConfNum: number;
  /** State written less than this before the runtime was asked is never released. */
  minAgeMs: number;
  dryRun: boolean;
}

/** An attachment released (in a dry run: to be). A torn reservation file has containerID and ifname ''. */
export interface ReleasedAttachment {
  network: string;
  containerID: string;
  ifname: string;
  addresses: string[];
}

export interface RepairReport {
  released: ReleasedAttachment[];
  /** Attachments kept because their sandbox is live, or because they are newer than minAge. */
  keptLive: number;
  keptYoung: number;
  /** Attachments whose addresses are parked for their pod (stickyTTL): the pod's until the parking ends. */
  keptParked: number;
  /** Plugins not sent GC: their VERSION does not list 1.1.0. */
  skipped: { network: string; type: string; supportedVersions: string[] }[];
  /** Config files of the conf dir that are not collected, and why. */
  ignored: { file: string; reason: string }[];
  /** What failed, each naming its network; `released` lists only what is gone. */
  errors: string[];
}

export async function repair(o: RepairOptions): Promise<RepairReport> {
  const askedAt = Date.now();
  const live = await liveSandboxes(o);
  const report: RepairReport = { released: [], keptLive: 0, keptYoung: 0, keptParked: 0, skipped: [], ignored: [], errors: [] };
  const inventories: { list: NetworkConfigList; inv: NetworkInventory }[] = [];
  for (const list of runtimeNetworks(o, report)) {
    try {
      inventories.push({ list, inv: await readInventory(list, o.cacheDir) });
    } catch (err) {
      report.errors.push(`network ${list.name}: reading its state: ${messageOf(err)}`);
    }
  }
  const plans = planRepair(
    inventories.map((i) => i.inv),
    live,
    askedAt - o.minAgeMs,
    Date.now(),
  );
  for (const [i, plan] of plans.entries()) {
    report.keptLive += plan.keptLive;
    report.keptYoung += plan.keptYoung;
    report.keptParked += plan.keptParked;
    const { list } = inventories[i];
    if (plan.stale.length === 0 && plan.torn.length === 0) continue;
    if (list.disableGC) {
      report.ignored.push({ file: list.file, reason: `network ${list.name} sets disableGC: ${plan.stale.length} stale attachment(s) stay` });
      continue;
    }
    await collect(list, plan, o, report);
  }
  return report;
}

/** The ids of every sandbox the runtime knows, in any state. */
async function liveSandboxes(o: RepairOptions): Promise<Set<string>> {
  const cri = new CriClient(o.runtimeEndpoint);
  try {
    return new Set((await cri.listPodSandboxes()).map((s) => s.id));
  } finally {
    cri.close();
  }
}

/**
 * The networks the runtime runs: the conf dir's valid configs in file name
 * order, the first `maxConfNum` of them, as containerd loads them. A network
 * name defined again in a later file is collected once, with the first
 * file's chain (libcni's LoadConfList picks the first too).
 */
function runtimeNetworks(o: RepairOptions, report: RepairReport): NetworkConfigList[] {
  const { networks, invalid } = readConfDir(o.confDir);
  report.ignored.push(...invalid);
  const loaded = o.maxConfNum > 0 ? networks.slice(0, o.maxConfNum) : networks;
  const firstFile = new Map<string, string>();
  return loaded.filter((list) => {
    try {
      validateNetworkName(list.name);
    } catch (err) {
      report.ignored.push({ file: list.file, reason: messageOf(err) });
      return false;
    }
    const first = firstFile.get(list.name);
    if (first !== undefined) {
      report.ignored.push({ file: list.file, reason: `network ${list.name} is already defined in ${first}` });
      return false;
    }
    firstFile.set(list.name, list.file);
    return true;
  });
}

async function collect(list: NetworkConfigList, plan: NetworkPlan, o: RepairOptions, report: RepairReport): Promise<void> {
  const network = list.name;
  const gc = await gcNetwork(list, {
    path: o.binDirs,
    validAttachments: plan.valid,
    cacheDir: o.cacheDir,
    staleAttachments: plan.stale.map(({ containerID, ifname }) => ({ containerID, ifname })),
    dryRun: o.dryRun,
  });
  report.skipped.push(...gc.skipped.map((s) => ({ network, ...s })));
  report.errors.push(...gc.errors.map((e) => `network ${network}: ${e}`));
  const released = (containerID: string, ifname: string, addresses: string[]) => report.released.push({ network, containerID, ifname, addresses });
  if (o.dryRun) {
    for (const a of plan.stale) released(a.containerID, a.ifname, a.addresses);
    for (const t of plan.torn) released('', '', [t.address]);
    return;
  }
  // What is gone is what was released: read the state again.
  let after: NetworkInventory;
  try {
    after = await readInventory(list, o.cacheDir);
  } catch (err) {
    report.errors.push(`network ${network}: reading its state after GC: ${messageOf(err)}`);
    return;
  }
  for (const a of plan.stale) {
    const left = after.attachments.find((b) => b.containerID === a.containerID && (b.ifname === a.ifname || b.ifname === '' || a.ifname === ''));
    if (left) report.errors.push(`network ${network}: ${attachmentName(a)} still holds state after GC${left.addresses.length ? ` (${left.addresses.join(', ')})` : ''}`);
    // its DEL parked its addresses (stickyTTL) and the GC did not release them (a host-local that is not ours)
    else if (after.parked.has(attachmentKey(a.containerID, a.ifname))) report.errors.push(`network ${network}: ${attachmentName(a)}: its addresses were parked for its pod, not released`);
    else released(a.containerID, a.ifname, a.addresses);
  }
  for (const t of plan.torn) {
    if (!after.torn.some((u) => u.address === t.address)) released('', '', [t.address]);
    else report.errors.push(`network ${network}: the torn reservation file of ${t.address} is still there after GC`);
  }
}

const attachmentName = (a: { containerID: string; ifname: string }) => `container ${a.containerID}${a.ifname ? ` (${a.ifname})` : ''}`;
const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
