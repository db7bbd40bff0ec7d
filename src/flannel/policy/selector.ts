// Kubernetes label selectors (metav1.LabelSelector) as NetworkPolicy uses
// them for pods and namespaces: matchLabels (key = value) and
// matchExpressions (In, NotIn, Exists, DoesNotExist), all ANDed; the empty
// selector {} selects everything. Semantics of apimachinery's
// LabelSelectorAsSelector: NotIn also matches a missing key; In and NotIn
// need values, Exists and DoesNotExist must have none.

export type Labels = Readonly<Record<string, string>>;

export interface Requirement {
  key: string;
  op: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values: readonly string[];
}

/** A parsed selector: every requirement must hold (none: everything matches). */
export interface Selector {
  readonly requirements: readonly Requirement[];
  /** Canonical text (sorted requirements): equal selectors have equal text. */
  readonly text: string;
}

export const EVERYTHING: Selector = { requirements: [], text: '{}' };

/** As kubectl writes a selector: app=web,tier in (a,b),!x; "(everything)" for {}. */
export function selectorText(sel: Selector): string {
  if (!sel.requirements.length) return '(everything)';
  const one = (r: Requirement) =>
    r.op === 'Exists'
      ? r.key
      : r.op === 'DoesNotExist'
        ? `!${r.key}`
        : r.op === 'In' && r.values.length === 1
          ? `${r.key}=${r.values[0]}`
          : `${r.key} ${r.op === 'In' ? 'in' : 'notin'} (${r.values.join(',')})`;
  return [...sel.requirements]
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map(one)
    .join(',');
}

const OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);
const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Why `value` at `where` is not a label selector we can enforce exactly; undefined when it is one. */
function problemOf(value: unknown, where: string): string | undefined {
  if (!isMap(value)) return `${where} is not a label selector`;
  for (const k of Object.keys(value))
    if (k !== 'matchLabels' && k !== 'matchExpressions' && value[k] !== null) return `${where}.${k} is not a field this daemon knows`;
  const ml = value.matchLabels;
  if (ml != null) {
    if (!isMap(ml)) return `${where}.matchLabels is not a map`;
    for (const [k, v] of Object.entries(ml)) if (typeof v !== 'string') return `${where}.matchLabels[${JSON.stringify(k)}] is not a string`;
  }
  const me = value.matchExpressions;
  if (me != null) {
    if (!Array.isArray(me)) return `${where}.matchExpressions is not a list`;
    for (const [i, e] of me.entries()) {
      const at = `${where}.matchExpressions[${i}]`;
      if (!isMap(e)) return `${at} is not an expression`;
      for (const k of Object.keys(e))
        if (k !== 'key' && k !== 'operator' && k !== 'values' && e[k] !== null) return `${at}.${k} is not a field this daemon knows`;
      if (typeof e.key !== 'string' || !e.key) return `${at}.key is missing`;
      if (typeof e.operator !== 'string' || !OPERATORS.has(e.operator))
        return `${at}.operator ${JSON.stringify(e.operator)} is not In, NotIn, Exists or DoesNotExist`;
      const values = e.values ?? [];
      if (!Array.isArray(values) || values.some((v) => typeof v !== 'string')) return `${at}.values is not a list of strings`;
      const needs = e.operator === 'In' || e.operator === 'NotIn';
      if (needs && values.length === 0) return `${at}: operator ${e.operator} needs values`;
      if (!needs && values.length > 0) return `${at}: operator ${e.operator} takes no values`;
    }
  }
  return undefined;
}

/** Parses a label selector; throws an Error naming `where` and the problem. */
export function parseSelector(value: unknown, where: string): Selector {
  const problem = problemOf(value, where);
  if (problem) throw new Error(problem);
  const v = value as {
    matchLabels?: Record<string, string> | null;
    matchExpressions?: { key: string; operator: Requirement['op']; values?: string[] | null }[] | null;
  };
  const reqs: Requirement[] = [];
  for (const [key, val] of Object.entries(v.matchLabels ?? {})) reqs.push({ key, op: 'In', values: [val] });
  for (const e of v.matchExpressions ?? []) reqs.push({ key: e.key, op: e.operator, values: [...new Set(e.values ?? [])].sort() });
  if (!reqs.length) return EVERYTHING;
  const texts = reqs.map(requirementText).sort();
  return { requirements: reqs, text: `{${[...new Set(texts)].join(', ')}}` };
}

function requirementText(r: Requirement): string {
  const key = JSON.stringify(r.key);
  switch (r.op) {
    case 'Exists':
      return key;
    case 'DoesNotExist':
      return `!${key}`;
    default:
      return r.op === 'In' && r.values.length === 1
        ? `${key}=${JSON.stringify(r.values[0])}`
        : `${key} ${r.op === 'In' ? 'in' : 'notin'} (${r.values.map((x) => JSON.stringify(x)).join(', ')})`;
  }
}

export function matches(sel: Selector, labels: Labels): boolean {
  for (const r of sel.requirements) {
    const has = Object.hasOwn(labels, r.key);
    switch (r.op) {
      case 'In':
        if (!has || !r.values.includes(labels[r.key])) return false;
        break;
      case 'NotIn':
        if (has && r.values.includes(labels[r.key])) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
    }
  }
  return true;
}
