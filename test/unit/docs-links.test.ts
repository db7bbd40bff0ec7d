// Every in-repo link of README.md and docs/*.md leads somewhere: the file
// exists, and an anchor (#...) is a heading of the page it names, as GitHub
// makes heading anchors. Links and headings inside code blocks do not count.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(__dirname, '../..');
const PAGES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** The page's text outside fenced code blocks. */
function prose(text: string): string {
  return text.replace(/^(```|~~~)[^\n]*\n[^]*?^\1[^\n]*$/gm, '');
}

/** GitHub's anchor of a heading: lower case, punctuation dropped (but - and _), spaces to -; repeats get -1, -2... */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of prose(text).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = m[1]
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n ? `${base}-${n}` : base);
  }
  return out;
}

/** The page's links: [text](target), without inline code spans. */
function links(text: string): string[] {
  const body = prose(text).replace(/`[^`\n]*`/g, '``');
  return [...body.matchAll(/\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]);
}

describe('links in the docs', () => {
  it('GitHub\'s anchors', () => {
    expect([...anchors('# The pod chain: kube-flannel in one process\n## Metrics (`/metrics`)\n```\n# not a heading\n```\n## Cluster scale: 1,000 Nodes\n## Limits\n## Limits\n')]).toEqual([
      'the-pod-chain-kube-flannel-in-one-process',
      'metrics-metrics',
      'cluster-scale-1000-nodes',
      'limits',
      'limits-1',
    ]);
  });

  for (const page of PAGES) {
    it(`${page}: every in-repo link and anchor resolves`, () => {
      const text = readFileSync(join(ROOT, page), 'utf8');
      const broken: string[] = [];
      for (const target of links(text)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:: not in the repository
        const [path, anchor] = target.split('#') as [string, string | undefined];
        const file = path ? resolve(dirname(join(ROOT, page)), path) : join(ROOT, page);
        if (!file.startsWith(ROOT) || !existsSync(file)) {
          broken.push(`${target}: ${relative(ROOT, file)} does not exist`);
          continue;
        }
        if (anchor !== undefined && file.endsWith('.md') && !anchors(readFileSync(file, 'utf8')).has(anchor)) {
          broken.push(`${target}: no heading #${anchor} in ${relative(ROOT, file)}`);
        }
      }
      expect(broken).toEqual([]);
    });
  }
});
