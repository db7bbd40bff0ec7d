// flanneld's --ip-masq and --iptables-forward-rules (src/flannel/traffic.ts)
// against the real iptables and nft, inside a throwaway network namespace:
// present after ensure, a second ensure changes nothing, a rule deleted by
// hand comes back, remove leaves none of ours and keeps a foreign rule in the
// same hook. (The daemon's use of them over time: flannel-filestore.test.ts.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Prefix } from '../../src/net/ip';
import { ensureForwardRules, ensureMasqRules, removeForwardRules, removeMasqRules, type TrafficBackend } from '../../src/flannel/traffic/rules';
import { makeNetns, sh } from './helpers';

const P = (s: string) => Prefix.parse(s)!;
const nets = [
  { network: P('10.244.0.0/16'), subnet: P('10.244.1.0/24') },
  { network: P('fd44::/48'), subnet: P('fd44:0:0:1::/64') },
];
const networks = nets.map((n) => n.network);

for (const backend of ['iptables', 'nftables'] as TrafficBackend[]) {
  describe(`${backend}`, () => {
    const ns = makeNetns(`cnits-traffic-${backend === 'iptables' ? 'ipt' : 'nft'}`);
    const inNs = (argv: string[], input?: string) => sh(['nsenter', `--net=${ns.path}`, '--', ...argv], input);
    const o = { netns: ns.path };
    /** Our rules, as the tools list them (both families, both rule sets). */
    const ours = (): string => {
      if (backend === 'iptables') {
        return ['iptables-save', 'ip6tables-save']
          .flatMap((save) => ['nat', 'filter'].flatMap((t) => inNs([save, '-t', t]).split('\n')))
          .filter((l) => l.includes('flanneld') || l.includes('FLANNEL-'))
          .join('\n');
      }
      // chain by chain in a fixed order (a rewritten chain is listed after the others)
      return ['ip flannel-ipv4', 'ip6 flannel-ipv6']
        .flatMap((t) => ['postrtg', 'forward'].map((c) => [...t.split(' '), c]))
        .map((tc) => {
          try {
            return inNs(['nft', 'list', 'chain', ...tc]);
          } catch {
            return '';
          }
        })
        .join('');
    };
    const foreign = (): string =>
      backend === 'iptables' ? inNs(['iptables-save', '-t', 'nat']).split('\n').filter((l) => l.includes('198.51.100.0/24')).join('\n') : inNs(['nft', 'list', 'table', 'ip', 'other']);

    beforeAll(() => {
      // another program's rule in the hook our rules hang off
      if (backend === 'iptables') inNs(['iptables', '-t', 'nat', '-A', 'POSTROUTING', '-s', '198.51.100.0/24', '-j', 'ACCEPT']);
      else inNs(['nft', '-f', '-'], 'add table ip other\nadd chain ip other post { type nat hook postrouting priority srcnat; }\nadd rule ip other post ip saddr 198.51.100.0/24 accept\n');
    });
    afterAll(() => ns.remove());

    it('ensure puts every rule in place, per family; a second ensure changes nothing', async () => {
      expect(await ensureMasqRules(backend, nets, o)).toEqual([`IPv4 masquerade rules (${backend})`, `IPv6 masquerade rules (${backend})`]);
      expect(await ensureForwardRules(backend, networks, o)).toEqual([`IPv4 forward rules (${backend})`, `IPv6 forward rules (${backend})`]);
      const first = ours();
      if (backend === 'iptables') {
        expect(first).toContain('-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG');
        expect(first).toContain('-A FLANNEL-POSTRTG -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN');
        expect(first).toContain('-A FLANNEL-POSTRTG -s fd44::/48 ! -d ff00::/8 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully');
        expect(first).toContain('-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT');
        expect(first).toContain('-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD');
      } else {
        expect(first).toMatch(/meta mark & 0x00004000 == 0x00004000 return comment "flanneld postrtg \w+"/);
        expect(first).toContain('ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random');
        expect(first).toContain('ip6 saddr != fd44::/48 ip6 daddr fd44::/48 masquerade fully-random');
        expect(first).toContain('type filter hook forward priority filter; policy accept;');
        expect(first).toContain('ip6 daddr fd44::/48 accept');
      }
      expect(await ensureMasqRules(backend, nets, o)).toEqual([]);
      expect(await ensureForwardRules(backend, networks, o)).toEqual([]);
      expect(ours()).toBe(first);
    });

    it('a rule deleted by hand comes back, in its place', async () => {
      const before = ours();
      if (backend === 'iptables') {
        inNs(['iptables', '-t', 'nat', '-D', 'FLANNEL-POSTRTG', '-s', '10.244.1.0/24', '-d', '10.244.0.0/16', '-m', 'comment', '--comment', 'flanneld masq', '-j', 'RETURN']);
        inNs(['ip6tables', '-t', 'filter', '-D', 'FORWARD', '-m', 'comment', '--comment', 'flanneld forward', '-j', 'FLANNEL-FWD']);
      } else {
        const handle = /ip saddr 10\.244\.1\.0\/24 ip daddr 10\.244\.0\.0\/16 return comment "[^"]+" # handle (\d+)/.exec(inNs(['nft', '-a', 'list', 'chain', 'ip', 'flannel-ipv4', 'postrtg']))![1];
        inNs(['nft', 'delete', 'rule', 'ip', 'flannel-ipv4', 'postrtg', 'handle', handle]);
        inNs(['nft', 'delete', 'chain', 'ip6', 'flannel-ipv6', 'forward']);
      }
      expect(ours()).not.toBe(before);
      expect(await ensureMasqRules(backend, nets, o)).toEqual([`IPv4 masquerade rules (${backend})`]);
      expect(await ensureForwardRules(backend, networks, o)).toEqual([`IPv6 forward rules (${backend})`]);
      expect(ours()).toBe(before);
    });

    it('another network replaces our rules of that family, leaving no rule of the old one', async () => {
      await ensureMasqRules(backend, [{ network: P('10.99.0.0/16'), subnet: P('10.99.3.0/24') }], o);
      const masq = ours().split('\n').filter((l) => l.includes(backend === 'iptables' ? 'flanneld masq' : 'flanneld postrtg'));
      expect(masq.filter((l) => l.includes('10.99.3.0/24'))).toHaveLength(3);
      expect(masq.filter((l) => l.includes('10.244.'))).toEqual([]);
      await ensureMasqRules(backend, nets, o);
    });

    it('remove takes exactly ours: nothing of ours is left, the foreign rule stays; a second remove finds nothing', async () => {
      const other = foreign();
      expect(other).toContain('198.51.100.0/24');
      expect(await removeMasqRules(backend, [4, 6], o)).toEqual([4, 6]);
      expect(await removeForwardRules(backend, [4, 6], o)).toEqual([4, 6]);
      expect(ours()).toBe('');
      expect(foreign()).toBe(other);
      expect(await removeMasqRules(backend, [4, 6], o)).toEqual([]);
      expect(await removeForwardRules(backend, [4, 6], o)).toEqual([]);
    });
  });
}
