// GC and STATUS. GC removes what stale attachments of this network left in
// the host firewall (masquerade, MAC spoof check), found by their tags, then
// hands over to the IPAM's GC. STATUS is the IPAM's STATUS (an L2-only
// network is always ready; an IPAM plugin older than STATUS is available, a
// missing one is not: code 50).
import { CniError, ErrorCode } from '../cni/errors';
import { validAttachments } from '../cni/gc';
import type { Request } from '../cni/skel';
import { parseBridgeConfig } from './config';
import { planIpam, callIpam, ipamSpeaks11, type IpamPlan } from './ipam';
import { attachmentTags, netTag } from './names';
import { kernelError } from './common';
import { settleAll } from '../util/settle';

export async function gc(req: Request): Promise<void> {
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'GC');
  const valid = validAttachments(req.conf);
  const ipam = cfg.ipamType ? planIpam(cfg.ipamType, req.inv.path) : undefined;
  const list = (req.conf['cni.dev/valid-attachments'] ?? req.conf['cni.dev/attachments'] ?? []) as { containerID: string; ifname: string }[];
  const keep = new Set(list.filter((a) => valid.has(a.containerID, a.ifname)).map((a) => attachmentTags(cfg.network, a.containerID, a.ifname).attTag));
  const mine = netTag(cfg.network);

  const cleanups: Promise<unknown>[] = [];
  if (cfg.ipMasq) {
    cleanups.push(
      // From both backends, as DEL.
      import('../iproute/masq').then(async ({ masqRemoveEverywhere }) => {
        const gone = await masqRemoveEverywhere((net, att) => net === mine && !keep.has(att)).catch((e) => {
          throw kernelError('GC of masquerade rules', e);
        });
        if (gone.length) process.stderr.write(`bridge: GC removed the masquerade rules of ${gone.length} stale attachment(s)\n`);
      }),
    );
  }
  if (cfg.macspoofchk) {
    cleanups.push(
      import('../iproute/spoofchk').then(async ({ spoofchkGc }) => {
        const gone = await spoofchkGc(mine, (att) => keep.has(att)).catch((e) => {
          throw kernelError('GC of MAC spoof checks', e);
        });
        if (gone.length) process.stderr.write(`bridge: GC removed the MAC spoof checks of ${gone.length} stale attachment(s)\n`);
      }),
    );
  }
  await settleAll(cleanups);
  if (ipam) await callIpam(ipam, 'GC', req);
}

export async function status(req: Request): Promise<void> {
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'STATUS');
  if (!cfg.ipamType) return;
  let ipam: IpamPlan;
  try {
    ipam = planIpam(cfg.ipamType, req.inv.path);
  } catch (err) {
    // Not installed (yet): the network cannot serve ADD, which STATUS answers with code 50.
    if (err instanceof CniError && err.code === ErrorCode.InvalidNetworkConfig && /not found in CNI_PATH/.test(err.message)) {
      throw new CniError(ErrorCode.PluginNotAvailable, err.message, err.details);
    }
    throw err;
  }
  try {
    await callIpam(ipam, 'STATUS', req);
  } catch (err) {
    // An IPAM plugin older than STATUS (spec 1.1) cannot answer it and has no
    // notion of readiness: Debian's Go host-local 1.1.1 says "unknown
    // CNI_COMMAND: STATUS" (code 4), or, called as a runtime calls STATUS
    // (no container ID), "missing containerID" (code 3, its checks for the
    // other commands). Such a plugin is available; its VERSION tells which it is.
    if (err instanceof CniError && (unknownCommand(err) || !(await ipamSpeaks11(ipam, req)))) return;
    throw err;
  }
}

const unknownCommand = (err: CniError) => err.code === ErrorCode.InvalidEnvironment && /\bSTATUS\b|CNI_COMMAND/.test(err.message);
