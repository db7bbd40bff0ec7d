// The three PATCH formats of the Kubernetes API, applied to an object as
// kube-apiserver applies them (facts from the API docs and k8s.io/api's
// patchStrategy tags; the stand-in API server's only use):
//   application/merge-patch+json            RFC 7386: maps merge, null deletes, lists are replaced
//   application/strategic-merge-patch+json  the same, but the kind's lists with a merge strategy merge
//                                           (a Node's conditions and addresses by "type", podCIDRs and
//                                           finalizers as sets, ownerReferences by "uid"; each kind's in
//                                           kube-kinds.ts), with the $patch,
//                                           $retainKeys, $setElementOrder/ and $deleteFromPrimitiveList/
//                                           directives kubectl and client-go send
//   application/json-patch+json             RFC 6902 operations on JSON pointers

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** A patch that cannot be applied; the server answers 422 with `message` (400 for undecodable ones). */
export class PatchError extends Error {
  constructor(
    message: string,
    readonly code: 400 | 422 = 422,
  ) {
    super(message);
  }
}

export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

const clone = <T extends Json>(v: T): T => structuredClone(v);

/** RFC 7386. */
export function mergePatch(target: Json | undefined, patch: Json): Json {
  if (!isObject(patch)) return clone(patch);
  const out: JsonObject = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** A Node's lists that merge under a strategic merge patch (path → merge key; '' = a list of scalars merged as a set). */
const NODE_LIST_MERGE: Record<string, string> = {
  'status.conditions': 'type',
  'status.addresses': 'type',
  'spec.podCIDRs': '',
  'metadata.finalizers': '',
  'metadata.ownerReferences': 'uid',
};

/** A strategic merge patch (lists other than `listMerge`'s are replaced, as their Go types say; a Node's by default). */
export function strategicMergePatch(target: Json | undefined, patch: Json, listMerge: Record<string, string> = NODE_LIST_MERGE): Json {
  return smp(target, patch, '', listMerge);
}

function smp(target: Json | undefined, patch: Json, path: string, LM: Record<string, string>): Json {
  if (!isObject(patch)) return clone(patch);
  const directive = patch.$patch;
  if (directive === 'replace') return withoutDirectives(patch);
  if (directive !== undefined && directive !== 'merge') throw new PatchError(`unknown $patch directive ${JSON.stringify(directive)} at ${path || 'the top'}`);
  const out: JsonObject = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$')) continue;
    const at = path ? `${path}.${k}` : k;
    if (v === null) delete out[k];
    else if (isObject(v) && v.$patch === 'delete') delete out[k];
    else if (Array.isArray(v) && Object.hasOwn(LM, at)) out[k] = mergeList(out[k], v, LM[at], at, LM);
    else out[k] = smp(out[k], v, at, LM);
  }
  for (const [k, v] of Object.entries(patch)) {
    const del = /^\$deleteFromPrimitiveList\/(.+)$/.exec(k);
    if (del && Array.isArray(out[del[1]]) && Array.isArray(v)) out[del[1]] = (out[del[1]] as Json[]).filter((x) => !v.includes(x));
    const order = /^\$setElementOrder\/(.+)$/.exec(k);
    if (order && Array.isArray(out[order[1]]) && Array.isArray(v)) {
      out[order[1]] = orderBy(out[order[1]] as Json[], v, LM[path ? `${path}.${order[1]}` : order[1]] ?? '');
    }
  }
  if (Array.isArray(patch.$retainKeys)) {
    const keep = new Set(patch.$retainKeys);
    for (const k of Object.keys(out)) if (!keep.has(k)) delete out[k];
  }
  return out;
}

function withoutDirectives(o: JsonObject): JsonObject {
  return Object.fromEntries(Object.entries(o).filter(([k]) => !k.startsWith('$')).map(([k, v]) => [k, clone(v)]));
}

function mergeList(target: Json | undefined, patch: Json[], key: string, path: string, LM: Record<string, string>): Json[] {
  if (patch.some((e) => isObject(e) && e.$patch === 'replace')) {
    return patch.filter((e) => !(isObject(e) && e.$patch === 'replace')).map((e) => (isObject(e) ? withoutDirectives(e) : clone(e)));
  }
  const out: Json[] = Array.isArray(target) ? [...target] : [];
  if (key === '') {
    for (const v of patch) if (!out.includes(v)) out.push(clone(v));
    return out;
  }
  for (const e of patch) {
    if (!isObject(e) || !(key in e)) throw new PatchError(`${path}: every element needs its merge key "${key}"`);
    const i = out.findIndex((o) => isObject(o) && o[key] === e[key]);
    if (e.$patch === 'delete') {
      if (i >= 0) out.splice(i, 1);
    } else if (i >= 0) out[i] = smp(out[i], e, path, LM);
    else out.push(withoutDirectives(e));
  }
  return out;
}

/** $setElementOrder: the listed elements first, in the listed order, then the others as they were. */
function orderBy(list: Json[], order: Json[], key: string): Json[] {
  const id = (e: Json) => JSON.stringify(key && isObject(e) ? e[key] : e);
  const rank = new Map(order.map((e, i) => [id(e), i]));
  return [...list].sort((a, b) => (rank.get(id(a)) ?? Infinity) - (rank.get(id(b)) ?? Infinity));
}

/** RFC 6902. */
export function jsonPatch(target: Json, ops: Json): Json {
  if (!Array.isArray(ops)) throw new PatchError('a JSON patch must be a list of operations', 400);
  let doc = clone(target);
  for (const op of ops) {
    if (!isObject(op) || typeof op.op !== 'string' || typeof op.path !== 'string') throw new PatchError(`bad JSON patch operation ${JSON.stringify(op)}`, 400);
    const value = () => {
      if (!('value' in op)) throw new PatchError(`operation ${op.op} at ${op.path} needs a "value"`);
      return clone(op.value);
    };
    const from = () => {
      if (typeof op.from !== 'string') throw new PatchError(`operation ${op.op} at ${op.path} needs a "from"`);
      return op.from;
    };
    switch (op.op) {
      case 'add':
        doc = put(doc, op.path, value(), 'add');
        break;
      case 'replace':
        doc = put(doc, op.path, value(), 'replace');
        break;
      case 'remove':
        doc = remove(doc, op.path);
        break;
      case 'move': {
        const v = get(doc, from());
        doc = put(remove(doc, from()), op.path, v, 'add');
        break;
      }
      case 'copy':
        doc = put(doc, op.path, clone(get(doc, from())), 'add');
        break;
      case 'test':
        if (JSON.stringify(get(doc, op.path)) !== JSON.stringify(value())) throw new PatchError(`testing value ${op.path} failed`);
        break;
      default:
        throw new PatchError(`unknown JSON patch operation ${JSON.stringify(op.op)}`, 400);
    }
  }
  return doc;
}

function pointer(path: string): string[] {
  if (path === '') return [];
  if (!path.startsWith('/')) throw new PatchError(`JSON pointer ${JSON.stringify(path)} must start with "/"`);
  return path.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function get(doc: Json, path: string): Json {
  let cur: Json = doc;
  for (const t of pointer(path)) {
    if (Array.isArray(cur) && /^\d+$/.test(t) && Number(t) < cur.length) cur = cur[Number(t)];
    else if (isObject(cur) && t in cur) cur = cur[t];
    else throw new PatchError(`path ${path} does not exist`);
  }
  return cur;
}

/** The container `path` points into and the last token. */
function parentOf(doc: Json, path: string): { parent: Json; last: string } {
  const tokens = pointer(path);
  if (tokens.length === 0) throw new PatchError('the whole document cannot be the target');
  const last = tokens.pop()!;
  const parentPath = tokens.map((t) => '/' + t.replace(/~/g, '~0').replace(/\//g, '~1')).join('');
  return { parent: get(doc, parentPath), last };
}

function put(doc: Json, path: string, value: Json, mode: 'add' | 'replace'): Json {
  if (path === '') return value;
  const { parent, last } = parentOf(doc, path);
  if (Array.isArray(parent)) {
    const i = last === '-' && mode === 'add' ? parent.length : /^\d+$/.test(last) ? Number(last) : -1;
    if (i < 0 || i > parent.length || (mode === 'replace' && i === parent.length)) throw new PatchError(`path ${path} is not a valid index`);
    if (mode === 'add') parent.splice(i, 0, value);
    else parent[i] = value;
  } else if (isObject(parent)) {
    if (mode === 'replace' && !(last in parent)) throw new PatchError(`path ${path} does not exist`);
    parent[last] = value;
  } else throw new PatchError(`path ${path}: its parent is not a map or a list`);
  return doc;
}

function remove(doc: Json, path: string): Json {
  const { parent, last } = parentOf(doc, path);
  if (Array.isArray(parent) && /^\d+$/.test(last) && Number(last) < parent.length) parent.splice(Number(last), 1);
  else if (isObject(parent) && last in parent) delete parent[last];
  else throw new PatchError(`path ${path} does not exist`);
  return doc;
}
