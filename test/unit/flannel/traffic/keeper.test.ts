// The daemon's firewall rules over time (src/flannel/traffic-keeper.ts)
// against a model of the firewall: both families, what goes at start, a
// failing resync reported once, removal.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Runner, setRunner } from '../../../../src/iproute/exec';
import { Prefix } from '../../../../src/net/ip';
import { TrafficKeeper, TrafficSettings } from '../../../../src/flannel/traffic/keeper';
import { FakeFirewall } from '../../../support/fake-firewall';

const P = (s: string) => Prefix.parse(s)!;
const dual = [
  { network: P('10.244.0.0/16'), subnet: P('10.244.3.0/24') },
  { network: P('fd44::/48'), subnet: P('fd44:0:0:3::/64') },
];

describe('TrafficKeeper', () => {
  let fw: FakeFirewall;
  let prev: Runner;
  let logs: string[];
  let broken: boolean;
  /** No iptables on the node: spawning it fails as spawn does. */
  let noIptables: boolean;
  const keepers: TrafficKeeper[] = [];
  beforeEach(() => {
    fw = new FakeFirewall();
    logs = [];
    broken = false;
    noIptables = false;
    // The firewall model, behind a runner of its own only to inject the two failures a node can have
    // (a refused restore, no iptables at all), which FakeFirewall does not model.
    prev = setRunner(async (argv, input) => {
      if (noIptables && argv[0].startsWith('ip')) throw Object.assign(new Error(`spawn ${argv[0]} ENOENT`), { code: 'ENOENT' });
      if (broken && argv[0].includes('restore')) return { stdout: '', stderr: 'iptables-restore: line 2 failed\n', code: 1 };
      const r = fw.run(argv, input);
      if (!r) throw new Error(`unexpected command ${argv.join(' ')}`);
      return r;
    });
  });
  afterEach(async () => {
    vi.useRealTimers();
    for (const k of keepers.splice(0)) await k.stop();
    setRunner(prev);
  });
  const keeper = (s: Partial<TrafficSettings> = {}) => {
    const k = new TrafficKeeper({ ipMasq: true, randomFully: true, forwardRules: true, resyncMs: 20, ...s }, (m) => logs.push(m));
    keepers.push(k);
    return k;
  };

  it('dual stack: both families\' rules, each family\'s networks', async () => {
    await keeper().start('iptables', dual);
    expect(fw.rules(6)).toContain('-A FLANNEL-POSTRTG -s fd44:0:0:3::/64 -d fd44::/48 -m comment --comment "flanneld masq" -j RETURN');
    expect(fw.rules(6)).toContain('-A FLANNEL-POSTRTG -s fd44::/48 ! -d ff00::/8 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully');
    expect(fw.rules(4)).toContain('-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT');
    expect(logs).toEqual([
      'IPv4 masquerade rules (iptables): put in place',
      'IPv6 masquerade rules (iptables): put in place',
      'IPv4 forward rules (iptables): put in place',
      'IPv6 forward rules (iptables): put in place',
      'keeping IPv4+IPv6 masquerade and forward rules (iptables), checked every 0.02 s',
    ]);
  });

  it('a family switched off loses its rules at the next start; the other keeps them untouched', async () => {
    const first = keeper();
    await first.start('iptables', dual);
    await first.stop();
    const v4 = fw.rules(4);
    logs = [];
    await keeper().start('iptables', [dual[0]]);
    expect(fw.rules(6)).toEqual([]);
    expect(fw.rules(4)).toEqual(v4);
    expect(logs).toEqual([
      'removed our IPv6 masquerade rules (iptables): not asked for',
      'removed our IPv6 forward rules (iptables): not asked for',
      'keeping IPv4 masquerade and forward rules (iptables), checked every 0.02 s',
    ]);
  });

  it('a resync that fails is reported once, and once when it works again', async () => {
    vi.useFakeTimers(); // resyncs every 20 ms by a clock the test moves
    await keeper().start('iptables', [dual[0]]);
    broken = true;
    fw.ipt.get('4 nat')!.get('POSTROUTING')!.length = 0;
    await vi.advanceTimersByTimeAsync(150); // seven resyncs
    expect(logs.filter((l) => l.startsWith('cannot keep'))).toEqual([
      'cannot keep the firewall rules: iptables-restore -w --noflush failed (exit 1): iptables-restore: line 2 failed; retrying every 0.02 s',
    ]);
    broken = false;
    await vi.advanceTimersByTimeAsync(100); // five more
    expect(logs.filter((l) => l.includes('again') || l.includes('put back'))).toEqual([
      'IPv4 masquerade rules (iptables) had been changed or removed: put back',
      'firewall rules are in place again',
    ]);
  });

  it('nothing asked for: nothing kept, no resync; remove() takes ours of both families', async () => {
    const first = keeper();
    await first.start('nftables', dual);
    await first.stop();
    expect([...fw.nft.keys()].sort()).toEqual(['ip flannel-ipv4', 'ip6 flannel-ipv6']);
    const none = keeper({ ipMasq: false, forwardRules: false });
    await none.start('nftables', dual);
    expect(fw.nft.size).toBe(0);
    expect(logs.filter((l) => l.startsWith('keeping'))).toHaveLength(1); // the first keeper's only
    const leaving = keeper();
    await leaving.start('nftables', dual);
    await leaving.stop();
    await leaving.remove();
    expect(fw.nft.size).toBe(0);
  });

  it('--random-fully as flanneld decides it: iptables 1.6.2 or newer', async () => {
    for (const [version, fully] of [['1.6.1', false], ['1.6.2', true], ['1.10.0', true], ['1.4.21', false]] as const) {
      fw.iptablesVersion = version;
      logs = [];
      const k = keeper({ forwardRules: false });
      await k.start('iptables', [dual[0]]);
      await k.stop();
      expect(fw.rules(4).some((r) => r.endsWith('--random-fully')), version).toBe(fully);
      expect(logs.some((l) => l === `masquerading without --random-fully, as flanneld would here: iptables ${version} is older than 1.6.2`), version).toBe(!fully);
    }
  });

  it('no iptables on the node: forward rules are reported and retried, not fatal; --ip-masq is', async () => {
    noIptables = true;
    vi.useFakeTimers();
    await keeper({ ipMasq: false }).start('iptables', [dual[0]]);
    expect(logs.filter((l) => l.startsWith('cannot'))).toEqual(['cannot put the forward rules in place: spawn iptables-save ENOENT; retrying every 0.02 s']);
    await vi.advanceTimersByTimeAsync(100); // five resyncs
    expect(logs.filter((l) => l.startsWith('cannot'))).toHaveLength(2); // the resync's own line, once
    await expect(keeper().start('iptables', [dual[0]])).rejects.toThrow('spawn iptables-save ENOENT');
  });
});
