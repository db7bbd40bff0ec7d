// `host-local ls`: the range set of each reservation comes from the network's
// config in the CNI config directory (a flannel network's from subnet.env, as
// flannel's plugin renders it); where it cannot be told, the listing says why.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatListing, listReservations } from '../../../src/ipam/ls';
import { delegateIpamOf } from '../../../src/flannel/plugin/cni';

describe('host-local ls: range sets and why one is "?"', () => {
  let dir: string;
  let dataDir: string;
  let confDir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'hl-ls-'));
    dataDir = join(dir, 'networks');
    confDir = join(dir, 'net.d');
    mkdirSync(confDir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const reserve = (network: string, ip: string, id: string) => {
    mkdirSync(join(dataDir, network), { recursive: true });
    writeFileSync(join(dataDir, network, ip), `${id}\r\neth0`);
  };
  const conf = (file: string, c: object) => writeFileSync(join(confDir, file), JSON.stringify(c));

  it('a host-local network: the range set index; an address outside its ranges: "?" with why', async () => {
    conf('10-br.conflist', { cniVersion: '1.0.0', name: 'br', plugins: [{ type: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }], [{ subnet: 'fd01::/64' }]] } }] });
    reserve('br', '10.1.0.2', 'a');
    reserve('br', 'fd01::2', 'a');
    reserve('br', '10.9.0.2', 'b');
    const rows = await listReservations(dataDir, confDir);
    expect(rows.map((r) => [r.ip, r.rangeSet, r.rangeSetUnknown])).toEqual([
      ['10.1.0.2', 0, undefined],
      ['10.9.0.2', null, `outside the ranges of ${join(confDir, '10-br.conflist')}`],
      ['fd01::2', 1, undefined],
    ]);
    expect(formatListing(rows).split('\n').slice(-2)).toEqual([`RANGESET ? (br 10.9.0.2): outside the ranges of ${join(confDir, '10-br.conflist')}`, '']);
  });

  it('no config names the network, or the directory cannot be read: one line under the table says so', async () => {
    reserve('gone', '10.2.0.2', 'a');
    reserve('gone', '10.2.0.3', 'b');
    let text = formatListing(await listReservations(dataDir, confDir));
    expect(text.match(/\?/g)).toHaveLength(3); // two rows and the note
    expect(text.trimEnd().split('\n').at(-1)).toBe(`RANGESET ? (gone): no config in ${confDir} names network "gone" (--conf-dir names the directory)`);
    text = formatListing(await listReservations(dataDir, join(dir, 'missing')));
    expect(text.trimEnd().split('\n').at(-1)).toBe(`RANGESET ? (gone): cannot read --conf-dir ${join(dir, 'missing')}: ENOENT (no such file or directory)`);
  });

  it('a flannel network: the ranges flannel\'s plugin renders from subnet.env; without subnet.env, that is the reason', async () => {
    const subnetFile = join(dir, 'subnet.env');
    conf('10-flannel.conflist', { cniVersion: '0.3.1', name: 'cbr0', plugins: [{ type: 'flannel', subnetFile, delegate: { isDefaultGateway: true } }, { type: 'portmap' }] });
    reserve('cbr0', '10.244.3.5', 'a');
    reserve('cbr0', 'fd00:10:244:3::5', 'a');
    let rows = await listReservations(dataDir, confDir, undefined, delegateIpamOf);
    expect(rows.map((r) => r.rangeSetUnknown)).toEqual([
      `${join(confDir, '10-flannel.conflist')}: flannel's plugin takes host-local's ranges from subnet.env: ${subnetFile} does not exist`,
      `${join(confDir, '10-flannel.conflist')}: flannel's plugin takes host-local's ranges from subnet.env: ${subnetFile} does not exist`,
    ]);
    writeFileSync(subnetFile, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n');
    rows = await listReservations(dataDir, confDir, undefined, delegateIpamOf);
    expect(rows.map((r) => [r.ip, r.rangeSet])).toEqual([['10.244.3.5', 0], ['fd00:10:244:3::5', 1]]);
    expect(formatListing(rows)).not.toContain('?');
    // without the flannel hook (a host-local-only view), the config is found but has no host-local IPAM
    rows = await listReservations(dataDir, confDir);
    expect(rows[0].rangeSetUnknown).toBe(`${join(confDir, '10-flannel.conflist')} has no host-local IPAM of network "cbr0"`);
  });
});
