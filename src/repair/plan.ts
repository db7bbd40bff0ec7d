// What repair releases, decided from the inventories and the runtime's
// answer alone (pure, so every rule is tested without a runtime):
//   - an attachment of a sandbox the runtime lists, in any state, is live;
//   - one whose newest state was written after `cutoffMs` is kept: a sandbox
//     being created holds its addresses before the runtime lists it (and the
//     runtime's answer is older than this moment);
//   - every other attachment is stale and goes;
//   - torn reservation files go when host-local's own GC would take them;
//   - addresses parked for a deleted pod (stickyTTL) are not judged: counted only.
// GC is told as valid every attachment that stays, plus, for each live
// sandbox, every ifname held for it on any network and eth0: runtimes name
// interfaces per network (eth0, eth1, ...) and a plugin outside our view must
// not take a live pod's second interface for garbage.
import type { Attachment } from '../cni/gc';
import { TORN_GRACE_MS } from '../ipam/host-local';
import type { HeldAttachment, NetworkInventory, TornReservation } from './inventory';

export interface NetworkPlan {
  network: string;
  stale: HeldAttachment[];
  /** Torn reservation files the GC releases. */
  torn: TornReservation[];
  /** cni.dev/valid-attachments for this network's GC. */
  valid: Attachment[];
  keptLive: number;
  keptYoung: number;
  keptParked: number;
}

/** The interface name CRI runtimes give a pod on their first network. */
const FIRST_IFNAME = 'eth0';

export function planRepair(inventories: readonly NetworkInventory[], live: ReadonlySet<string>, cutoffMs: number, nowMs: number): NetworkPlan[] {
  const liveIfnames = new Map<string, Set<string>>([...live].map((id) => [id, new Set([FIRST_IFNAME])]));
  for (const inv of inventories) for (const a of inv.attachments) liveIfnames.get(a.containerID)?.add(a.ifname);
  const liveAttachments: Attachment[] = [...liveIfnames].flatMap(([containerID, names]) => [...names].map((ifname) => ({ containerID, ifname })));

  return inventories.map((inv) => {
    const plan: NetworkPlan = { network: inv.network, stale: [], torn: [], valid: [...liveAttachments], keptLive: 0, keptYoung: 0, keptParked: inv.parked.size };
    for (const a of inv.attachments) {
      if (live.has(a.containerID)) plan.keptLive++;
      else if (a.newestMs > cutoffMs) {
        plan.keptYoung++;
        plan.valid.push({ containerID: a.containerID, ifname: a.ifname });
      } else plan.stale.push(a);
    }
    plan.torn = inv.torn.filter((t) => nowMs - t.mtimeMs >= TORN_GRACE_MS);
    return plan;
  });
}
