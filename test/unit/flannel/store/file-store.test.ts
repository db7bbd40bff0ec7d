// The embedded file store: the lease store contract (test/support/store-contract.ts)
// and what only it does: leases expire by their "Expiration" and expire() removes them.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IP, Prefix } from '../../../../src/net/ip';
import { FileStore } from '../../../../src/flannel/store/file-store';
import { acquireLease } from '../../../../src/flannel/store/acquire';
import { parseNetworkConfig } from '../../../../src/flannel/netconfig';
import { LeaseAttrs } from '../../../../src/flannel/lease';
import { leaseStoreContract } from '../../../support/store-contract';

const P = (s: string) => Prefix.parse(s)!;

leaseStoreContract('FileStore', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'flannel-filestore-'));
  return { store: new FileStore(dir), dispose: () => rmSync(dir, { recursive: true, force: true }) };
});

describe('file store: expiry', () => {
  let dir: string;
  let store: FileStore;
  const cfg = parseNetworkConfig('{"Network":"10.88.0.0/16","SubnetLen":26,"SubnetMin":"10.88.3.0","SubnetMax":"10.88.3.192","Backend":{"Type":"vxlan"}}');
  const attrs = (n: number): LeaseAttrs => ({ publicIP: IP.parse(`192.168.88.${n}`)!, backendType: 'vxlan', vni: 1, vtepMAC: `0a:00:00:00:00:0${n}` });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'flannel-filestore-'));
    store = new FileStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('expired leases are free again and are removed by expire()', async () => {
    await store.create({ subnet: P('10.88.3.0/26') }, attrs(1), -1);
    expect((await store.list()).leases).toHaveLength(0);
    const a = await acquireLease(store, cfg, attrs(2), { ttlS: 60, previous: { subnet: P('10.88.3.0/26') } });
    expect(a.subnet?.toString()).toBe('10.88.3.0/26');
    await store.create({ subnet: P('10.88.3.64/26') }, attrs(3), -1);
    await store.expire();
    expect((await store.list()).leases.map((l) => l.subnet?.toString())).toEqual(['10.88.3.0/26']);
  });});
