// The bridge plugin's configuration: the reference's fields, defaults and
// rules, validated up front so a bad config fails before anything changes.
// Every error names the field it rejects.
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { CniError, ErrorCode, invalidConfig } from '../cni/errors';
import { Json, NetConf, optArray, optBool, optInt, optObject, optString } from '../cni/config';
import type { CniArgs } from '../cni/args';
import { atLeast } from '../cni/version';
import type { DNS } from '../cni/result';
import type { MasqBackend } from '../iproute/masq';
import { linkNameProblem } from '../net/ifname';
import { isUnicastMac, normalizeMac } from '../net/mac';
import { vlanGatewayName } from './names';

const DEFAULT_BRIDGE = 'cni0';

export interface BridgeConfig {
  network: string;
  cniVersion: string;
  /** DEL does not read it; GC reads its ports, and gets '' when the name cannot be a link (nothing of ours is on it). */
  bridge: string;
  isGateway: boolean;
  isDefaultGateway: boolean;
  forceAddress: boolean;
  ipMasq: boolean;
  /**
   * ADD and CHECK only. DEL and GC neither read nor validate it: they clean up
   * both backends, so a config whose backend changed (or no longer validates)
   * is still cleaned up.
   */
  ipMasqBackend: MasqBackend;
  /** 0: leave the kernel's default. */
  mtu: number;
  hairpinMode: boolean;
  promiscMode: boolean;
  /** Access VLAN of the port; 0: none. */
  vlan: number;
  /** Tagged VLANs of a trunk port, sorted. */
  vlanTrunk: number[];
  preserveDefaultVlan: boolean;
  macspoofchk: boolean;
  enabledad: boolean;
  disableContainerInterface: boolean;
  portIsolation: boolean;
  /** The IPAM plugin; undefined for an L2-only attachment. */
  ipamType?: string;
  /** DNS from the config: replaces the IPAM's when set. */
  dns?: DNS;
  /** The container interface's MAC, from runtimeConfig.mac, args.cni.mac or CNI_ARGS MAC. */
  mac?: string;
}

export type Phase = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';

/**
 * Parses and validates the config. DEL (and GC/STATUS) read only what
 * cleaning up needs, so a config that became invalid can still be deleted;
 * ADD and CHECK validate everything.
 */
export function parseBridgeConfig(conf: NetConf, args: CniArgs, phase: Phase): BridgeConfig {
  const full = phase === 'ADD' || phase === 'CHECK';
  const bool = (key: string) => optBool(conf, key) ?? false;

  const ipam = optObject(conf, 'ipam');
  const ipamType = ipam ? optString(ipam, 'type', 'ipam.') || undefined : undefined;
  const ipMasq = bool('ipMasq');
  const cfg: BridgeConfig = {
    network: conf.name,
    cniVersion: conf.cniVersion,
    // Cleaning up never fails on the bridge's name: only ADD and CHECK need a valid one.
    bridge: full ? parseBridgeName(conf) : phase === 'GC' ? bridgeNameOrNone(conf) : DEFAULT_BRIDGE,
    isGateway: false,
    isDefaultGateway: false,
    forceAddress: false,
    ipMasq,
    ipMasqBackend: full ? parseBackend(conf, ipMasq) : 'iptables',
    mtu: 0,
    hairpinMode: false,
    promiscMode: false,
    vlan: 0,
    vlanTrunk: [],
    preserveDefaultVlan: false,
    macspoofchk: bool('macspoofchk'),
    enabledad: false,
    disableContainerInterface: false,
    portIsolation: false,
    ipamType,
  };
  if (!full) return cfg;

  cfg.isDefaultGateway = bool('isDefaultGateway');
  cfg.isGateway = bool('isGateway') || cfg.isDefaultGateway;
  cfg.forceAddress = bool('forceAddress');
  cfg.mtu = parseMtu(conf);
  cfg.hairpinMode = bool('hairpinMode');
  cfg.promiscMode = bool('promiscMode');
  cfg.vlan = optInt(conf, 'vlan', 0, 4094) ?? 0;
  cfg.vlanTrunk = parseVlanTrunk(conf);
  cfg.preserveDefaultVlan = bool('preserveDefaultVlan');
  cfg.enabledad = bool('enabledad');
  cfg.disableContainerInterface = bool('disableContainerInterface');
  cfg.portIsolation = bool('portIsolation');
  cfg.dns = parseDns(conf);
  cfg.mac = parseMac(conf, args);

  if (cfg.hairpinMode && cfg.promiscMode) {
    throw invalidConfig('fields "hairpinMode" and "promiscMode" cannot both be true');
  }
  if (cfg.vlan > 0 && cfg.vlanTrunk.length > 0) {
    throw invalidConfig('fields "vlan" and "vlanTrunk" cannot be set at the same time');
  }
  if (!ipamType && !atLeast(cfg.cniVersion, '0.3.0')) {
    // Checked now, not when printing: by then the attachment would exist.
    throw new CniError(
      ErrorCode.IncompatibleVersion,
      `cniVersion ${cfg.cniVersion} results carry only IP addresses, so they cannot describe an L2-only attachment (no "ipam"); use 0.3.0 or later`,
    );
  }
  if (cfg.disableContainerInterface && ipamType) {
    throw invalidConfig('field "disableContainerInterface" cannot be used with IPAM (field "ipam.type")');
  }
  if (cfg.isGateway && cfg.vlan > 0 && linkNameProblem(vlanGatewayName(cfg.bridge, cfg.vlan))) {
    throw invalidConfig(
      `field "bridge": with "vlan" and "isGateway" the gateway link is named ${JSON.stringify(vlanGatewayName(cfg.bridge, cfg.vlan))}, longer than 15 bytes`,
    );
  }
  return cfg;
}

function parseBridgeName(conf: Json): string {
  const name = optString(conf, 'bridge') || DEFAULT_BRIDGE;
  const problem = linkNameProblem(name);
  if (problem) throw invalidConfig(`field "bridge" ${JSON.stringify(name)} is not a valid link name: ${problem}`);
  return name;
}

function bridgeNameOrNone(conf: Json): string {
  const name = typeof conf.bridge === 'string' && conf.bridge ? conf.bridge : DEFAULT_BRIDGE;
  return linkNameProblem(name) ? '' : name;
}

function parseMtu(conf: Json): number {
  const mtu = optInt(conf, 'mtu', 0, 65535) ?? 0;
  if (mtu !== 0 && mtu < 68) throw invalidConfig(`field "mtu" must be 0 (the default) or from 68 to 65535, got ${mtu}`);
  return mtu;
}

function parseBackend(conf: Json, ipMasq: boolean): MasqBackend {
  const raw = optString(conf, 'ipMasqBackend');
  if (raw !== undefined && raw !== '') {
    if (raw !== 'iptables' && raw !== 'nftables') {
      throw invalidConfig(`field "ipMasqBackend" must be "iptables" or "nftables", got ${JSON.stringify(raw)}`);
    }
    return raw;
  }
  // Unset: iptables where it is installed (the reference's behaviour), nftables otherwise.
  if (!ipMasq) return 'iptables';
  return onPath('iptables-restore') || !onPath('nft') ? 'iptables' : 'nftables';
}

function onPath(program: string): boolean {
  for (const dir of (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':')) {
    try {
      if (dir && statSync(join(dir, program)).isFile()) return true;
    } catch {
      // not here
    }
  }
  return false;
}

function parseVlanTrunk(conf: Json): number[] {
  const list = optArray(conf, 'vlanTrunk');
  if (!list) return [];
  const ids = new Set<number>();
  list.forEach((raw, i) => {
    const where = `vlanTrunk[${i}].`;
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw invalidConfig(`field "vlanTrunk[${i}]" must be an object`);
    const item = raw as Json;
    const min = optInt(item, 'minID', 1, 4094, where);
    const max = optInt(item, 'maxID', 1, 4094, where);
    const id = optInt(item, 'id', 1, 4094, where);
    if ((min === undefined) !== (max === undefined)) {
      throw invalidConfig(`field "vlanTrunk[${i}]": "minID" and "maxID" must be set together`);
    }
    if (min !== undefined && max !== undefined) {
      if (min > max) throw invalidConfig(`field "vlanTrunk[${i}]": "minID" ${min} is greater than "maxID" ${max}`);
      for (let v = min; v <= max; v++) ids.add(v);
    }
    if (id !== undefined) ids.add(id);
    if (min === undefined && id === undefined) throw invalidConfig(`field "vlanTrunk[${i}]" needs "id" or "minID" and "maxID"`);
  });
  return [...ids].sort((a, b) => a - b);
}

function stringList(obj: Json, key: string, where: string): string[] | undefined {
  const list = optArray(obj, key, where);
  if (!list) return undefined;
  list.forEach((v, i) => {
    if (typeof v !== 'string') throw invalidConfig(`field "${where}${key}[${i}]" must be a string`);
  });
  return list as string[];
}

/** The config's DNS, when it sets anything (the reference's dnsConfSet). */
function parseDns(conf: Json): DNS | undefined {
  const dns = optObject(conf, 'dns');
  if (!dns) return undefined;
  const out: DNS = {};
  const nameservers = stringList(dns, 'nameservers', 'dns.');
  const search = stringList(dns, 'search', 'dns.');
  const options = stringList(dns, 'options', 'dns.');
  const domain = optString(dns, 'domain', 'dns.');
  if (nameservers) out.nameservers = nameservers;
  if (domain) out.domain = domain;
  if (search) out.search = search;
  if (options) out.options = options;
  const set = nameservers !== undefined || search !== undefined || options !== undefined || !!domain;
  return set ? out : undefined;
}

function checkMac(raw: string, field: string, code: number): string {
  const mac = normalizeMac(raw);
  if (!mac || !isUnicastMac(mac)) {
    throw new CniError(code, `${field} ${JSON.stringify(raw)} is not a unicast MAC address (six hex bytes, e.g. 02:42:ac:11:00:02)`);
  }
  return mac;
}

/** runtimeConfig.mac, then args.cni.mac, then CNI_ARGS MAC (the reference's precedence). */
function parseMac(conf: Json, args: CniArgs): string | undefined {
  const runtimeMac = optString(optObject(conf, 'runtimeConfig') ?? {}, 'mac', 'runtimeConfig.');
  if (runtimeMac) return checkMac(runtimeMac, 'field "runtimeConfig.mac"', ErrorCode.InvalidNetworkConfig);
  const argsMac = optString(optObject(optObject(conf, 'args') ?? {}, 'cni', 'args.') ?? {}, 'mac', 'args.cni.');
  if (argsMac) return checkMac(argsMac, 'field "args.cni.mac"', ErrorCode.InvalidNetworkConfig);
  const envMac = args.get('MAC');
  if (envMac) return checkMac(envMac, 'CNI_ARGS MAC', ErrorCode.InvalidEnvironment);
  return undefined;
}
