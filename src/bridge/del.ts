// DEL: idempotent. The veth is removed from the host side by its derived
// name (the container end goes with it), so DEL needs neither the container's
// namespace nor its addresses; masquerade rules are found by their tags.
// Only when the host end is missing and the namespace still exists is the
// container's CNI_IFNAME removed there (an attachment made by another
// bridge implementation). The bridge is never deleted.
import { existsSync } from 'node:fs';
import { CniError, ErrorCode } from '../cni/errors';
import type { Request } from '../cni/skel';
import { runBatch, isNoDevice, isBatchSafe } from '../iproute/batch';
import { linkDel } from '../iproute/link';
import { linkNameProblem } from '../net/ifname';
import { settleAll } from '../util/settle';
import { parseBridgeConfig } from './config';
import { planIpam, callIpam } from './ipam';
import { attachmentTags, hostVethName } from './names';
import { kernelError } from './kernel-error';
import { mark } from './trace';

export async function del(req: Request): Promise<void> {
  mark('del');
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'DEL');
  const { containerId, ifname, netns } = req.inv;
  const tags = attachmentTags(cfg.network, containerId, ifname);
  const hostVeth = hostVethName(containerId, ifname);

  const tasks: Promise<unknown>[] = [
    // The link first, then the addresses: an address is never free while a link still holds it.
    removeLinks(hostVeth, ifname, netns).then(async () => {
      mark('links');
      // Looked up only now: a plugin missing from CNI_PATH must not keep the links and rules from going.
      if (cfg.ipamType) await callIpam(planIpam(cfg.ipamType, req.inv.path), 'DEL', req);
      mark('ipam');
    }),
  ];
  if (cfg.ipMasq && cfg.ipamType) {
    // From both backends: ADD may have used another one than the config names now.
    tasks.push(
      import('../iproute/masq').then(({ masqDelEverywhere }) =>
        masqDelEverywhere(tags.attTag).catch((e) => {
          throw kernelError('removing masquerade rules', e);
        }),
      ),
    );
  }
  if (cfg.macspoofchk) {
    tasks.push(
      import('../iproute/spoofchk').then(({ spoofchkDel }) =>
        spoofchkDel(tags, hostVeth).catch((e) => {
          throw kernelError('removing the MAC spoof check', e);
        }),
      ),
    );
  }
  await settleAll(tasks);
}

async function removeLinks(hostVeth: string, ifname: string, netns: string): Promise<void> {
  const res = await runBatch('ip', [linkDel(hostVeth)]);
  const err = res.errors[0];
  if (err === undefined) return;
  if (!isNoDevice(err)) throw new CniError(ErrorCode.Internal, `failed to delete ${hostVeth}: ${err}`);
  // (A name ADD would refuse cannot be in the container because of us.)
  if (!netns || linkNameProblem(ifname) || !isBatchSafe([netns]) || !existsSync(netns)) return;
  let inside;
  try {
    inside = await runBatch('ip', [linkDel(ifname)], { netns });
  } catch (e) {
    // Not a namespace any more (a bind mount that was unmounted): nothing to delete in it.
    process.stderr.write(`bridge: DEL: cannot enter ${netns}: ${(e as Error).message}\n`);
    return;
  }
  const inErr = inside.errors[0];
  if (inErr !== undefined && !isNoDevice(inErr)) throw new CniError(ErrorCode.Internal, `failed to delete ${ifname} in ${netns}: ${inErr}`);
}
