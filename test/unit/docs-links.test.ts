/**
 * The documentation names what exists: every relative link in README.md and
 * docs/ reaches a file (and, into a markdown file, a heading), every repository
 * path written in backticks (`api/…`, `worker/…`, `shared/…`, `test/…`,
 * `bench/…`, `dev/…`, `deploy/…`, `docs/…`) is in the tree, and neither the
 * docs nor the code refer to issues of a tracker that is not in the repository.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = join(__dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');

const SKIP_DIRS = new Set(['node_modules', 'dist', 'coverage', '.data', '.git', 'out']);

/** Files under `dir` (relative to the root) whose names end with `suffix`. */
function walk(dir: string, suffix: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) found.push(...walk(path, suffix));
    } else if (entry.name.endsWith(suffix)) found.push(path);
  }
  return found;
}

const DOCS = ['README.md', ...walk('docs', '.md')];

/** The text outside fenced code blocks, line by line (code blocks hold commands and trees). */
function prose(text: string): { line: number; text: string }[] {
  const lines: { line: number; text: string }[] = [];
  let fenced = false;
  text.split('\n').forEach((t, i) => {
    if (/^\s*(```|~~~)/.test(t)) fenced = !fenced;
    else if (!fenced) lines.push({ line: i + 1, text: t });
  });
  return lines;
}

/** GitHub's anchors for a markdown file's headings (lower case, punctuation dropped, spaces to '-'). */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const base = heading[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    result.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const match of text.matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) result.add(match[1]!);
  return result;
}

const anchorCache = new Map<string, Set<string>>();
const anchorsOf = (file: string) => {
  if (!anchorCache.has(file)) anchorCache.set(file, anchors(read(file)));
  return anchorCache.get(file)!;
};

/** Each relative link of a markdown file that does not reach its target, as `file:line target`. */
export function brokenLinks(file: string, text: string): string[] {
  const broken: string[] = [];
  for (const { line, text: t } of prose(text)) {
    const code = t.replace(/`[^`]*`/g, '');
    for (const match of code.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = match[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      const [pathPart, anchor] = target.split('#') as [string, string | undefined];
      const path = decodeURIComponent(pathPart.split('?')[0]!);
      const self = path === '';
      const resolved = self ? file : relative(root, resolve(root, dirname(file), path));
      const where = `${file}:${line} ${target}`;
      if (!self && (resolved.startsWith('..') || !existsSync(join(root, resolved)))) {
        broken.push(where);
      } else if (
        anchor !== undefined &&
        resolved.endsWith('.md') &&
        !(self ? anchors(text) : anchorsOf(resolved)).has(decodeURIComponent(anchor))
      ) {
        broken.push(`${where} (no such heading)`);
      }
    }
  }
  return broken;
}

const TOP = ['api', 'worker', 'shared', 'test', 'bench', 'dev', 'deploy', 'docs'];
const PATH_IN_CODE = new RegExp(`(?:^|[\\s(=,])((?:${TOP.join('|')})/[^\\s\`'"),;:]*)`, 'g');

/** Outputs a command writes and the tree ignores (`bench/out/`): named in the docs, absent from a clone. */
const IGNORED = read('.gitignore')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l.includes('/') && !l.startsWith('#'));

/** A repository path written in prose, outside backticks and links: with an extension, to tell it from words. */
const PATH_IN_PROSE = new RegExp(
  `(?:^|[\\s(])((?:${TOP.join('|')})/[\\w./@-]*\\.[a-z]{1,5})(?![\\w/])`,
  'g',
);

/** Whether a path names nothing in the tree (patterns and ignored outputs are not checked). */
function absent(path: string): boolean {
  if (/[<>*{}…$]|\.\.\./.test(path)) return false;
  if (IGNORED.some((ignored) => path.startsWith(ignored))) return false;
  return !existsSync(join(root, path));
}

/**
 * Each repository path that is not in the tree: in a backticked span, or in
 * prose with an extension (`docs/x.md`). Patterns (`<org>/…`, `*`, `{a,b}`,
 * `…`) are not paths, nor are the arguments of a `kubectl …` command
 * (`deploy/media-api`); a path marked ` (new)` (a file a walk-through adds)
 * or ` (removed)` right after its span is allowed.
 */
export function missingPaths(file: string, text: string): string[] {
  const missing: string[] = [];
  for (const { line, text: t } of prose(text)) {
    for (const span of t.matchAll(/`([^`]+)`( \((?:new|removed)\))?/g)) {
      if (span[2] || span[1]!.startsWith('kubectl ')) continue;
      for (const match of span[1]!.matchAll(PATH_IN_CODE)) {
        const path = match[1]!.replace(/[.]+$/, '');
        if (absent(path)) missing.push(`${file}:${line} ${path}`);
      }
    }
    const plain = t.replace(/`[^`]*`/g, ' ').replace(/\]\([^)]*\)/g, '] ');
    for (const match of plain.matchAll(PATH_IN_PROSE)) {
      if (absent(match[1]!)) missing.push(`${file}:${line} ${match[1]!}`);
    }
  }
  return missing;
}

/**
 * The word "issue" and a number: an issue of a tracker the repository does not hold.
 * Allowed only where the same line names the other project's repository
 * (`owner/name#123`, `owner/name issue 123`, a github.com issue address).
 */
const ISSUE = /\bissues? \d+/i;
const OTHER_PROJECT =
  /\b[\w.-]+\/[\w.-]+(?:#\d+| issues? \d+)|github\.com\/[\w.-]+\/[\w.-]+\/issues\/\d+/gi;

export function trackerReferences(file: string, text: string): string[] {
  const found: string[] = [];
  text.split('\n').forEach((t, i) => {
    if (ISSUE.test(t.replace(OTHER_PROJECT, '')) || /\bround two\b/i.test(t)) {
      found.push(`${file}:${i + 1} ${t.trim().slice(0, 120)}`);
    }
  });
  return found;
}

describe('documentation', () => {
  it('every relative link in README.md and docs/ reaches a file, and a heading where it names one', () => {
    expect(DOCS.flatMap((file) => brokenLinks(file, read(file)))).toEqual([]);
  });

  it('every backticked repository path in README.md and docs/ exists', () => {
    expect(DOCS.flatMap((file) => missingPaths(file, read(file)))).toEqual([]);
  });

  it('no README, doc or source file refers to an issue of a tracker outside the repository', () => {
    // This file is left out: its own examples must match.
    const self = relative(root, __filename);
    const sources = ['api', 'worker', 'shared', 'dev', 'bench', 'test']
      .flatMap((dir) => walk(dir, '.ts'))
      .filter((file) => file !== self);
    expect([...DOCS, ...sources].flatMap((file) => trackerReferences(file, read(file)))).toEqual(
      [],
    );
  });

  it('the checks find what they look for', () => {
    const doc = [
      '# Title',
      '## A heading, with `code`',
      'See [here](#a-heading-with-code), [there](missing.md), [up](../outside.md),',
      '[bad anchor](#nowhere), [web](https://example.com) and `api/nowhere.ts`,',
      '`shared/errors.ts`, `test/<tier>/x.ts`, `docs/*.md`, `npm run bench`, `bench/out/x.json`,',
      '`dev/gone.ts` (removed), `api/routes/new.ts` (new), `kubectl get deploy/media-api`,',
      'see docs/gone.md and docs/api.md, or http://localhost:3000/docs/openapi.yaml.',
      '```',
      '[not a link](nowhere.md) `worker/nowhere.ts`',
      '```',
      'Known upstream: lovell/sharp#1234 and Cisco-Talos/clamav issue 541.',
    ].join('\n');
    expect(brokenLinks('docs/x.md', doc)).toEqual([
      'docs/x.md:3 missing.md',
      'docs/x.md:3 ../outside.md',
      'docs/x.md:4 #nowhere (no such heading)',
    ]);
    expect(missingPaths('docs/x.md', doc)).toEqual([
      'docs/x.md:4 api/nowhere.ts',
      'docs/x.md:7 docs/gone.md',
    ]);
    expect(trackerReferences('x.ts', doc)).toEqual([]);
    expect(trackerReferences('x.ts', '// Issue 15 point 3: results are bounded')).toHaveLength(1);
    expect(trackerReferences('x.ts', '// issue 12, unlike lovell/sharp#1234')).toHaveLength(1);
    expect(trackerReferences('x.md', '## Round two: routes')).toHaveLength(1);
  });
});
