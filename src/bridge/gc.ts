// GC and STATUS. GC removes what stale attachments of this network left on
// the host: the host ends of their veths (a veth outlives its container when
// the container's namespace is kept, e.g. bind-mounted by a runtime that
// died), their masquerade rules and MAC spoof checks, all found by the
// attachment's tags; then it hands over to the IPAM's GC. STATUS is the IPAM's
// STATUS (an L2-only network is always ready; an IPAM plugin older than STATUS
// is available, a missing one is not: code 50).
import { CniError, ErrorCode } from '../cni/errors';
import { gcScope, type Attachment, type GcScope } from '../cni/gc';
import type { Request } from '../cni/skel';
import { isNoDevice, runBatch } from '../iproute/batch';
import { linkDel, showVethPorts, type IpLink } from '../iproute/link';
import { parseBridgeConfig } from './config';
import { planIpam, callIpam, ipamSpeaks11, type IpamPlan } from './ipam';
import { attachmentTags, hostVethName, isHostVethName, netTag, parseVethAlias } from './names';
import { kernelError } from './kernel-error';
import { settleAll } from '../util/settle';

export async function gc(req: Request): Promise<void> {
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'GC');
  const scope = gcScope(req.conf);
  const ipam = cfg.ipamType ? planIpam(cfg.ipamType, req.inv.path) : undefined;
  const mine = netTag(cfg.network);
  const tagsOf = (list: readonly Attachment[]) => new Set(list.map((a) => attachmentTags(cfg.network, a.containerID, a.ifname).attTag));
  const keep = tagsOf(scope.valid);
  const stale = scope.stale && tagsOf(scope.stale);
  const releases = (attTag: string) => !keep.has(attTag) && (stale?.has(attTag) ?? true);

  const cleanups: Promise<unknown>[] = [];
  if (cfg.bridge) {
    cleanups.push(
      removeStaleVeths(cfg.bridge, mine, releases, scope).then((gone) => {
        if (gone.length) process.stderr.write(`bridge: GC removed the host veths of ${gone.length} stale attachment(s): ${gone.join(', ')}\n`);
      }),
    );
  }
  if (cfg.ipMasq) {
    cleanups.push(
      // From both backends, as DEL.
      import('../iproute/masq').then(async ({ masqRemoveEverywhere }) => {
        const gone = await masqRemoveEverywhere((net, att) => net === mine && releases(att)).catch((e) => {
          throw kernelError('GC of masquerade rules', e);
        });
        if (gone.length) process.stderr.write(`bridge: GC removed the masquerade rules of ${gone.length} stale attachment(s)\n`);
      }),
    );
  }
  if (cfg.macspoofchk) {
    cleanups.push(
      import('../iproute/spoofchk').then(async ({ spoofchkGc }) => {
        const gone = await spoofchkGc(mine, (att) => !releases(att)).catch((e) => {
          throw kernelError('GC of MAC spoof checks', e);
        });
        if (gone.length) process.stderr.write(`bridge: GC removed the MAC spoof checks of ${gone.length} stale attachment(s)\n`);
      }),
    );
  }
  // The links first, then the addresses (IPAM): an address is never free while a link still holds it.
  await settleAll(cleanups);
  if (ipam) await callIpam(ipam, 'GC', req);
}

/**
 * Deletes the host veths of stale attachments on the network's bridge:
 * veths named as we name them whose alias carries this network's tag and a
 * stale attachment's. One made before veths carried the alias is taken only
 * when the caller named its attachment stale (cni-ts.dev/stale-attachments)
 * and its name is that attachment's. A veth with any other alias, or named
 * otherwise, is not ours and stays. Returns the deleted names.
 */
async function removeStaleVeths(bridge: string, mine: string, releases: (attTag: string) => boolean, scope: GcScope): Promise<string[]> {
  const listing = await runBatch('ip', [showVethPorts(bridge)], { json: true }).catch((e) => {
    throw kernelError(`GC of host veths: listing the ports of bridge "${bridge}"`, e);
  });
  const listErr = listing.errors[0];
  if (listErr !== undefined) {
    if (isNoDevice(listErr)) return []; // no bridge: no ports
    throw new CniError(ErrorCode.Internal, `GC of host veths: listing the ports of bridge "${bridge}": ${listErr}`);
  }
  const named = new Set(
    (scope.stale ?? []).filter((a) => a.ifname !== '' && scope.releases(a.containerID, a.ifname)).map((a) => hostVethName(a.containerID, a.ifname)),
  );
  const gone = ((listing.outputs[0] ?? []) as IpLink[])
    .filter((port) => {
      if (!isHostVethName(port.ifname)) return false;
      if (!port.ifalias) return named.has(port.ifname);
      const tags = parseVethAlias(port.ifalias);
      return tags !== undefined && tags.netTag === mine && releases(tags.attTag);
    })
    .map((port) => port.ifname);
  if (gone.length === 0) return [];
  const res = await runBatch('ip', gone.map(linkDel));
  const failed = res.errors.map((err, i) => (err !== undefined && !isNoDevice(err) ? `${gone[i]}: ${err}` : undefined)).filter(Boolean);
  if (failed.length) throw new CniError(ErrorCode.Internal, `GC of host veths: failed to delete ${failed.join('; ')}`);
  return gone;
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
