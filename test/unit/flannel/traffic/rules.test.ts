// flanneld's --ip-masq and --iptables-forward-rules rule sets: what is
// planned from a listing (nothing when all is there, a missing jump alone,
// a whole chain when its rules differ, removal of ours only), and the
// commands the API runs against recorded listings.
import { afterEach, describe, expect, it } from 'vitest';
import { setRunner, type Runner } from '../../../../src/iproute/exec';
import { Prefix } from '../../../../src/net/ip';
import { FORWARD_PLACE, MASQ_PLACE, forwardChainSet, masqChainSet, planEnsure, planRemove } from '../../../../src/flannel/traffic/iptables';
import { nftMasqSet, planNftEnsure, planNftRemove, readListing, ruleComment } from '../../../../src/flannel/traffic/nftables';
import { ensureForwardRules, ensureMasqRules, removeMasqRules } from '../../../../src/flannel/traffic/rules';

const P = (s: string) => Prefix.parse(s)!;
const set4 = masqChainSet(4, '10.244.0.0/16', '10.244.1.0/24', true);
const saved = (lines: string[]) => ['*nat', ':POSTROUTING ACCEPT [0:0]', ...lines, 'COMMIT'].join('\n');
const full = saved([
  '-A POSTROUTING -j KUBE-POSTROUTING',
  `-A POSTROUTING ${set4.jump}`,
  ':FLANNEL-POSTRTG - [0:0]',
  ...set4.rules.map((r) => `-A FLANNEL-POSTRTG ${r}`),
]);

describe('iptables rule sets', () => {
  it('are flanneld\'s: kube-proxy mark, no NAT inside the network, MASQUERADE --random-fully out of it', () => {
    expect(set4.rules).toEqual([
      '-m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN',
      '-s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN',
      '-s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN',
      '! -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN',
      '-s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
      '! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
    ]);
    expect(masqChainSet(6, 'fd00::/48', 'fd00:0:0:1::/64', false).rules[4]).toBe('-s fd00::/48 ! -d ff00::/8 -m comment --comment "flanneld masq" -j MASQUERADE');
    expect(forwardChainSet('10.244.0.0/16')).toMatchObject({ table: 'filter', hook: 'FORWARD', rules: ['-s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT', '-d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT'] });
  });

  it('nothing to do when chain and jump are there', () => {
    expect(planEnsure(full, set4)).toEqual([]);
  });

  it('from nothing: the chain with its rules, then the jump', () => {
    expect(planEnsure(saved([]), set4)).toEqual([':FLANNEL-POSTRTG - [0:0]', ...set4.rules.map((r) => `-A FLANNEL-POSTRTG ${r}`), `-A POSTROUTING ${set4.jump}`]);
  });

  it('a missing jump is appended alone; a missing rule rewrites the chain in order', () => {
    expect(planEnsure(full.replace(`-A POSTROUTING ${set4.jump}\n`, ''), set4)).toEqual([`-A POSTROUTING ${set4.jump}`]);
    const lines = planEnsure(full.replace(`-A FLANNEL-POSTRTG ${set4.rules[1]}\n`, ''), set4);
    expect(lines).toEqual([':FLANNEL-POSTRTG - [0:0]', ...set4.rules.map((r) => `-A FLANNEL-POSTRTG ${r}`)]);
  });

  it('another network\'s rules are replaced', () => {
    const other = masqChainSet(4, '10.99.0.0/16', '10.99.3.0/24', true);
    const lines = planEnsure(full, other);
    expect(lines[0]).toBe(':FLANNEL-POSTRTG - [0:0]');
    expect(lines.filter((l) => l.includes('10.244.'))).toEqual([]);
  });

  it('removal: our jumps and chain, never the other rules of POSTROUTING', () => {
    expect(planRemove(full, MASQ_PLACE)).toEqual([`-D POSTROUTING ${set4.jump}`, '-F FLANNEL-POSTRTG', '-X FLANNEL-POSTRTG']);
    expect(planRemove(saved(['-A POSTROUTING -j KUBE-POSTROUTING']), MASQ_PLACE)).toEqual([]);
    expect(planRemove(saved([]), FORWARD_PLACE)).toEqual([]);
  });
});

describe('nftables rule sets', () => {
  const set = nftMasqSet(4, '10.244.0.0/16', '10.244.1.0/24', true);
  const listing = (comments: string[], hook = 'postrouting', chains = ['postrtg']) =>
    readListing(
      JSON.stringify({
        nftables: [
          { table: { family: 'ip', name: 'flannel-ipv4' } },
          ...chains.map((name) => ({ chain: { name, type: 'nat', hook: name === 'postrtg' ? hook : 'forward' } })),
          ...comments.map((comment, handle) => ({ rule: { chain: 'postrtg', handle, comment } })),
        ],
      }),
    );
  const mine = set.rules.map((r) => ruleComment('postrtg', r));

  it('the same rules in nft words, each commented with its hash', () => {
    expect(set.rules).toEqual([
      'meta mark and 0x4000 == 0x4000 return',
      'ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return',
      'ip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
      'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
    ]);
    expect(new Set(mine).size).toBe(6);
  });

  it('nothing to do when the chain holds exactly our rules; otherwise the chain is replaced in one transaction', () => {
    expect(planNftEnsure(listing(mine), set)).toEqual([]);
    const fromNothing = planNftEnsure(readListing('{}'), set);
    expect(fromNothing[0]).toBe('add table ip flannel-ipv4');
    expect(fromNothing[1]).toBe('add chain ip flannel-ipv4 postrtg { type nat hook postrouting priority srcnat; policy accept; }');
    expect(fromNothing[2]).toBe(`add rule ip flannel-ipv4 postrtg meta mark and 0x4000 == 0x4000 return comment "${mine[0]}"`);
    expect(fromNothing).toHaveLength(8);
    const oneGone = planNftEnsure(listing(mine.filter((_, i) => i !== 2)), set);
    expect(oneGone.slice(0, 3)).toEqual(['add table ip flannel-ipv4', 'flush chain ip flannel-ipv4 postrtg', 'delete chain ip flannel-ipv4 postrtg']);
    // flanneld's own chain (rules without our comments) is taken over the same way
    expect(planNftEnsure(listing([]), set)).toHaveLength(10);
  });

  it('removal: the chain, or the table when it was its last chain', () => {
    expect(planNftRemove(listing(mine), 4, 'postrtg')).toEqual(['delete table ip flannel-ipv4']);
    expect(planNftRemove(listing(mine, 'postrouting', ['postrtg', 'forward']), 4, 'postrtg')).toEqual(['flush chain ip flannel-ipv4 postrtg', 'delete chain ip flannel-ipv4 postrtg']);
    expect(planNftRemove(readListing('{}'), 4, 'postrtg')).toEqual([]);
  });
});

describe('the API against recorded commands', () => {
  let restore: Runner | undefined;
  const calls: { argv: readonly string[]; input?: string }[] = [];
  // A recording runner rather than the fake firewall: these tests are about the exact argv and stdin
  // the API sends and how it reads each reply, failures included (a missing binary, a refused restore).
  const fake = (reply: (argv: readonly string[]) => { stdout?: string; stderr?: string; code?: number }) => {
    calls.length = 0;
    restore = setRunner(async (argv, input) => {
      calls.push({ argv, input });
      const r = reply(argv);
      return { stdout: r.stdout ?? '', stderr: r.stderr ?? '', code: r.code ?? 0 };
    });
  };
  afterEach(() => {
    if (restore) setRunner(restore);
  });
  const nets = [{ network: P('10.244.0.0/16'), subnet: P('10.244.1.0/24') }, { network: P('fd00::/48'), subnet: P('fd00:0:0:1::/64') }];

  it('iptables, all in place: one iptables-save per family and nothing else', async () => {
    const v6 = masqChainSet(6, 'fd00::/48', 'fd00:0:0:1::/64', true);
    fake((argv) => ({
      stdout: argv[argv.indexOf('-t') - 1] === 'ip6tables-save' ? saved([`-A POSTROUTING ${v6.jump}`, ':FLANNEL-POSTRTG - [0:0]', ...v6.rules.map((r) => `-A FLANNEL-POSTRTG ${r}`)]) : full,
    }));
    expect(await ensureMasqRules('iptables', nets, { netns: '/run/netns/x' })).toEqual([]);
    expect(calls.map((c) => c.argv.slice(3).join(' '))).toEqual(['iptables-save -t nat', 'ip6tables-save -t nat']);
    expect(calls[0].argv.slice(0, 3)).toEqual(['nsenter', '--net=/run/netns/x', '--']);
  });

  it('iptables, nothing there: one restore per family, --noflush, of the nat table', async () => {
    fake(() => ({ stdout: saved([]) }));
    expect(await ensureMasqRules('iptables', nets)).toEqual(['IPv4 masquerade rules (iptables)', 'IPv6 masquerade rules (iptables)']);
    const restores = calls.filter((c) => c.argv[0].endsWith('-restore'));
    expect(restores.map((c) => c.argv.join(' '))).toEqual(['iptables-restore -w --noflush', 'ip6tables-restore -w --noflush']);
    expect(restores[0].input).toMatch(/^\*nat\n:FLANNEL-POSTRTG - \[0:0\]\n/);
    expect(restores[0].input).toMatch(/\nCOMMIT\n$/);
  });

  it('nftables forward rules: one listing, one transaction; removal without nft installed is nothing', async () => {
    fake((argv) => (argv[1] === '-j' ? { code: 1, stderr: 'Error: No such file or directory' } : {}));
    expect(await ensureForwardRules('nftables', [P('10.244.0.0/16')])).toEqual(['IPv4 forward rules (nftables)']);
    expect(calls.map((c) => c.argv.join(' '))).toEqual(['nft -j list table ip flannel-ipv4', 'nft -f -']);
    expect(calls[1].input).toContain('add chain ip flannel-ipv4 forward { type filter hook forward priority filter; policy accept; }');
    fake(() => {
      throw Object.assign(new Error('spawn nft ENOENT'), { code: 'ENOENT' });
    });
    expect(await removeMasqRules('nftables', [4, 6])).toEqual([]);
  });
});
