// The stand-in API server's label and field selectors, in the text form
// kubectl and client-go send them (?labelSelector=app=web,tier in (a,b),!x).

export type Requirement = { key: string; op: '=' | '!=' | 'in' | 'notin' | 'exists' | '!'; values: string[] };

/** A bad selector: the server answers 400 with `message`. */
export class SelectorError extends Error {}

function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const c of text) {
    if (c === '(') depth++;
    if (c === ')') depth--;
    if (c === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += c;
  }
  if (cur.trim()) parts.push(cur);
  return parts.map((p) => p.trim()).filter(Boolean);
}

export function parseLabelSelector(text: string | undefined): Requirement[] {
  if (!text) return [];
  return splitTopLevel(text).map((part) => {
    let m = /^(\S+?)\s*(==|=|!=)\s*(\S*)$/.exec(part);
    if (m) return { key: m[1], op: m[2] === '!=' ? '!=' : '=', values: [m[3]] };
    m = /^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(part);
    if (m) return { key: m[1], op: m[2] as 'in' | 'notin', values: m[3].split(',').map((v) => v.trim()) };
    if (/^!\S+$/.test(part)) return { key: part.slice(1), op: '!', values: [] };
    if (/^\S+$/.test(part)) return { key: part, op: 'exists', values: [] };
    throw new SelectorError(`unable to parse requirement: ${JSON.stringify(part)}`);
  });
}

/** A field selector of the fields `known` (the kind's): only = and !=. */
export function parseFieldSelector(text: string | undefined, known: ReadonlySet<string>): Requirement[] {
  if (!text) return [];
  return splitTopLevel(text).map((part) => {
    const m = /^([^=!]+?)\s*(==|=|!=)\s*(.*)$/.exec(part);
    if (!m) throw new SelectorError(`invalid field selector: ${JSON.stringify(part)}`);
    if (!known.has(m[1])) throw new SelectorError(`field label not supported: ${m[1]}`);
    return { key: m[1], op: m[2] === '!=' ? '!=' : '=', values: [m[3]] };
  });
}

export function matches(reqs: Requirement[], get: (key: string) => string | undefined): boolean {
  return reqs.every(({ key, op, values }) => {
    const v = get(key);
    switch (op) {
      case '=':
        return v === values[0];
      case '!=':
        return v !== values[0];
      case 'in':
        return v !== undefined && values.includes(v);
      case 'notin':
        return v === undefined || !values.includes(v);
      case 'exists':
        return v !== undefined;
      case '!':
        return v === undefined;
    }
  });
}
