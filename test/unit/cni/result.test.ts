import { describe, expect, it } from 'vitest';
import { formatResult, parseResult, Result } from '../../../src/cni/result';
import { CniError } from '../../../src/cni/errors';

const dual: Result = {
  interfaces: [{ name: 'cni0', mac: '0a:00:00:00:00:01' }, { name: 'eth0', sandbox: '/var/run/netns/x' }],
  ips: [
    { address: '10.1.0.5/24', gateway: '10.1.0.1', interface: 1 },
    { address: 'fd01::5/64', gateway: 'fd01::1', interface: 1 },
    { address: '10.2.0.5/24' },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }, { dst: '::/0' }],
  dns: { nameservers: ['10.1.0.53'] },
};

describe('formatResult', () => {
  it('1.x: as is, no version in ips', () => {
    const out = formatResult(dual, '1.1.0') as any;
    expect(out.cniVersion).toBe('1.1.0');
    expect(out.ips[0]).toEqual({ address: '10.1.0.5/24', gateway: '10.1.0.1', interface: 1 });
    expect(out.interfaces).toHaveLength(2);
  });

  it.each(['0.3.0', '0.3.1', '0.4.0'])('%s: ips carry their version', (v) => {
    const out = formatResult(dual, v) as any;
    expect(out.ips.map((i: any) => i.version)).toEqual(['4', '6', '4']);
    expect(out.cniVersion).toBe(v);
  });

  it.each(['0.1.0', '0.2.0'])('%s: first address per family, routes split by family', (v) => {
    const out = formatResult(dual, v) as any;
    expect(out).toEqual({
      cniVersion: v,
      ip4: { ip: '10.1.0.5/24', gateway: '10.1.0.1', routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }] },
      ip6: { ip: 'fd01::5/64', gateway: 'fd01::1', routes: [{ dst: '::/0' }] },
      dns: { nameservers: ['10.1.0.53'] },
    });
  });

  it('0.2.0 cannot express a result without addresses', () => {
    expect(() => formatResult({ interfaces: [{ name: 'x' }] }, '0.2.0')).toThrow(CniError);
  });
});

describe('parseResult', () => {
  it.each(['0.2.0', '0.3.1', '0.4.0', '1.0.0'])('round-trips addresses and routes through %s', (v) => {
    const back = parseResult(formatResult(dual, v));
    const expectedIps = v === '0.2.0' ? dual.ips!.slice(0, 2).map(({ interface: _i, ...ip }) => ip) : dual.ips;
    expect(back.ips).toEqual(expectedIps);
    expect(back.routes).toEqual(dual.routes);
  });

  it.each([[null], [[]], ['x'], [{ ips: 'x' }], [{ ips: [{ address: 5 }] }]])('rejects %j with code 6', (raw) => {
    try {
      parseResult(raw);
      throw new Error('accepted');
    } catch (err) {
      expect((err as CniError).code).toBe(6);
    }
  });
});
