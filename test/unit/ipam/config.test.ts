import { describe, expect, it } from 'vitest';
import { loadIpamConfig, loadStoreLocation } from '../../../src/ipam/config';
import { parseNetConf } from '../../../src/cni/config';
import { parseCniArgs } from '../../../src/cni/args';
import { CniError } from '../../../src/cni/errors';
import { thrown } from '../../support/expect';
import { IP } from '../../../src/net/ip';

const conf = (ipam: object, extra: object = {}) =>
  parseNetConf(JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'host-local', ipam: { type: 'host-local', ...ipam }, ...extra }));
const load = (ipam: object, extra: object = {}, args = '') => loadIpamConfig(conf(ipam, extra), parseCniArgs(args));


/** Counts IP comparisons while `fn` runs, failing as soon as there are more than `budget`. */
function comparisons(budget: number, fn: () => void): number {
  const compare = IP.prototype.compare;
  let n = 0;
  IP.prototype.compare = function (this: IP, other: IP) {
    if (++n > budget) throw new Error(`more than ${budget} comparisons`);
    return compare.call(this, other);
  };
  try {
    fn();
  } finally {
    IP.prototype.compare = compare;
  }
  return n;
}

describe('host-local config', () => {
  it('checks 20,000 ranges for overlaps in n log n comparisons, and still finds the one overlap among them', () => {
    const n = 20_000;
    const slash30 = (k: number) => ({ subnet: `10.${k >> 12}.${(k >> 4) & 255}.${(k & 15) * 16}/28` });
    const ranges = Array.from({ length: n }, (_, k) => slash30(k));
    const budget = 40 * n; // n log2 n is ~14 n; the pairwise check made n^2 / 2 (2e8, 4 s)
    expect(comparisons(budget, () => load({ ranges: [ranges] }))).toBeLessThan(budget);
    const sets = ranges.map((r) => [r]); // the same across range sets
    expect(comparisons(budget, () => load({ ranges: sets }))).toBeLessThan(budget);
    const clash = [...ranges.slice(0, 12_345), { subnet: '10.1.2.0/24' }, ...ranges.slice(12_345)];
    expect(thrown(CniError, () => comparisons(budget, () => load({ ranges: [clash] }))).message).toMatch(
      /^field "ipam.ranges\[0\]": ranges 10\.1\.2\.\d+-10\.1\.2\.\d+ and 10\.1\.2\.1-10\.1\.2\.254 overlap$/,
    );
  });

  it('applies the reference defaults', () => {
    const cfg = load({ ranges: [[{ subnet: '10.1.0.0/24' }], [{ subnet: 'fd01::/64' }]] });
    expect(cfg.dataDir).toBe('/var/lib/cni/networks');
    const [v4, v6] = cfg.rangeSets;
    expect([String(v4.ranges[0].start), String(v4.ranges[0].end), String(v4.ranges[0].gateway)]).toEqual(['10.1.0.1', '10.1.0.254', '10.1.0.1']);
    expect(String(v6.ranges[0].end)).toBe('fd01::ffff:ffff:ffff:ffff');
  });

  it('puts the legacy top-level range first, then ranges; runtime ipRanges before both', () => {
    const cfg = load(
      { subnet: '10.2.0.0/24', rangeStart: '10.2.0.10', ranges: [[{ subnet: '10.3.0.0/24' }]] },
      { runtimeConfig: { ipRanges: [[{ subnet: '10.4.0.0/24' }]] } },
    );
    expect(cfg.rangeSets.map((s) => s.ranges[0].subnet.toString())).toEqual(['10.4.0.0/24', '10.2.0.0/24', '10.3.0.0/24']);
    expect(cfg.rangeSets.map((s) => s.index)).toEqual([0, 1, 2]);
    expect(String(cfg.rangeSets[1].ranges[0].start)).toBe('10.2.0.10');
  });

  it.each([
    [{}, /no IP ranges/],
    [{ ranges: [[{ subnet: '10.0.0.0/31' }]] }, /ipam.ranges\[0\]\[0\].subnet.*too small/],
    [{ ranges: [[{ subnet: '10.0.0.0/32' }]] }, /too small/],
    [{ ranges: [[{ subnet: 'fd00::/127' }]] }, /too small/],
    [{ ranges: [[{ subnet: 'fd00::/128' }]] }, /too small/],
    [{ ranges: [[{ subnet: '10.0.0.1/24' }]] }, /host bits set: the network address is 10.0.0.0\/24/],
    [{ ranges: [[{ subnet: '10.0.0.0/24', rangeStart: '10.0.1.5' }]] }, /rangeStart" 10.0.1.5 is not in subnet/],
    [{ ranges: [[{ subnet: '10.0.0.0/24', rangeEnd: '10.0.0.255' }]] }, /rangeEnd" 10.0.0.255 is the broadcast address/],
    [{ ranges: [[{ subnet: '10.0.0.0/24', rangeStart: '10.0.0.0' }]] }, /rangeStart" 10.0.0.0 is the network address/],
    [{ ranges: [[{ subnet: '10.0.0.0/24', rangeStart: '10.0.0.50', rangeEnd: '10.0.0.40' }]] }, /rangeStart" 10.0.0.50 is after/],
    [{ ranges: [[{ subnet: '10.0.0.0/24', gateway: 'fd00::1' }]] }, /gateway" fd00::1 is not in subnet/],
    [{ ranges: [[{ subnet: '10.0.0.0/24' }, { subnet: 'fd00::/64' }]] }, /mixes IPv4 and IPv6/],
    [{ ranges: [[{ subnet: '10.0.0.0/24' }, { subnet: '10.0.0.0/25' }]] }, /overlap/],
    [{ ranges: [[{ subnet: '10.0.0.0/24' }], [{ subnet: '10.0.0.128/25' }]] }, /range sets .* overlap/],
    [{ ranges: [[]] }, /empty range set/],
    [{ ranges: [[{ rangeStart: '10.0.0.1' }]] }, /subnet" is required/],
    [{ ranges: [[{ subnet: 'banana' }]] }, /not a CIDR prefix/],
    [{ ranges: 'x' }, /ipam.ranges" must be a list/],
    [{ ranges: [[{ subnet: '10.0.0.0/24' }]], dataDir: 'relative/dir' }, /absolute path/],
    [{ ranges: [[{ subnet: '10.0.0.0/24' }]], routes: [{ dst: 'x' }] }, /routes\[0\].dst/],
    [{ ranges: [[{ subnet: '10.0.0.0/24' }]], routes: [{ dst: '0.0.0.0/0', gw: 'fd00::1' }] }, /routes\[0\].gw/],
  ])('rejects %j with code 7', (ipam, message) => {
    const err = thrown(CniError, () => load(ipam));
    expect(err.code).toBe(7);
    expect(err.message).toMatch(message);
  });

  it('refuses two range sets of one family below 0.3.0', () => {
    const err = thrown(CniError, () =>
      loadIpamConfig(
        parseNetConf(JSON.stringify({ cniVersion: '0.2.0', name: 'n', ipam: { ranges: [[{ subnet: '10.0.0.0/24' }], [{ subnet: '10.1.0.0/24' }]] } })),
        parseCniArgs(''),
      ),
    );
    expect(err.message).toMatch(/only one address per family/);
  });

  describe('requested addresses', () => {
    const ipam = { ranges: [[{ subnet: '10.5.0.0/24' }], [{ subnet: 'fd05::/64' }]] };
    const req = (cfg: ReturnType<typeof load>) => [...cfg.requested].map(([i, ip]) => `${i}:${ip}`);

    it('reads CNI_ARGS IP (several, comma separated)', () => {
      expect(req(load(ipam, {}, 'IP=10.5.0.7,fd05::7'))).toEqual(['0:10.5.0.7', '1:fd05::7']);
    });
    it('config args win over CNI_ARGS', () => {
      expect(req(load(ipam, { args: { cni: { ips: ['10.5.0.8/24'] } } }, 'IP=10.5.0.7'))).toEqual(['0:10.5.0.8']);
    });
    it('adds runtimeConfig.ips (the ips capability)', () => {
      expect(req(load(ipam, { runtimeConfig: { ips: ['fd05::9/64'] }, args: { cni: { ips: ['10.5.0.8'] } } }))).toEqual(['1:fd05::9', '0:10.5.0.8']);
    });
    it.each([
      ['IP=10.6.0.1', 7, /not in any range/],
      ['IP=10.5.0.1', 7, /is the gateway/],
      ['IP=10.5.0.2,10.5.0.3', 7, /both in range set/],
      ['IP=nonsense', 4, /CNI_ARGS IP: "nonsense" is not an IP address/],
    ])('%s fails with code %i', (args, code, message) => {
      const err = thrown(CniError, () => load(ipam, {}, args));
      expect(err.code).toBe(code);
      expect(err.message).toMatch(message);
    });
  });

  it('DEL needs only the location, even when ranges are missing', () => {
    expect(loadStoreLocation(conf({ dataDir: '/tmp/x/' }))).toEqual({ network: 'n', dataDir: '/tmp/x', lockTimeoutMs: 10000 });
    expect(thrown(CniError, () => loadStoreLocation(parseNetConf('{"cniVersion":"1.0.0","name":"n"}'))).code).toBe(7);
  });
});
