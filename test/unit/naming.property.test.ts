/**
 * Property-based tests of the name sanitiser and the key builder
 * (shared/media/naming.ts), with fast-check: whatever a client sends as a file
 * or folder name, the record's name is safe to store and show, and the object
 * key stays inside the organization's prefix, in a fixed shape.
 */
import fc from 'fast-check';
import {
  buildKey,
  FALLBACK_NAME,
  folderSlug,
  keyBaseName,
  MAX_KEY_BASE_LENGTH,
  MAX_NAME_LENGTH,
  ORG_SLUG_PATTERN,
  randomToken,
  safeDisplayName,
} from '../../shared/media/naming';

const RUNS = { numRuns: 2_000 };

/** Characters that must never reach a record's name. */
const FORBIDDEN_IN_NAME =
  // eslint-disable-next-line no-control-regex
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff/\\]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The shapes of the parts of a key. */
const BASE = /^[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?$/;
const SLUG = /^[a-z0-9_](?:[a-z0-9._-]*[a-z0-9_])?$/;
const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
const EXTS = ['jpg', 'jpeg', 'png', 'webp', 'gif', 'avif', 'tiff', 'heic', 'heif', 'pdf'];
/** The key shape, with the builder's 12-character tokens (`randomToken`, the worker's job tokens). */
const KEY =
  /^(?<org>[a-z0-9][a-z0-9-]{0,61}[a-z0-9])\/(?:(?<folder>[a-z0-9_](?:[a-z0-9._-]*[a-z0-9_])?)\/)?(?<base>[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?)-(?<token>[A-Za-z0-9_-]{12})\.(?<ext>[a-z0-9]{1,10})$/;

/** Pieces hostile names are made of: traversal, encodings, controls, bidi, emoji, RTL scripts. */
const hostilePiece = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 12 }),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.constantFrom(
    '../',
    '..\\',
    '..',
    '.',
    '/',
    '\\',
    '%2e%2e%2f',
    '%2F',
    '..%2F..%2Fetc%2Fpasswd',
    '\u0000',
    '\r\n',
    '\t',
    '\u001b[31m',
    '\u0085',
    '\u202e',
    '\u2066',
    '\u200f',
    '\u061c',
    '\u2028',
    '\ufeff',
    'gpj.exe',
    '👍🏽',
    '👨‍👩‍👧‍👦',
    'مرحبا',
    'שלום',
    'e\u0301',
    'ﬁ',
    'ℌ',
    'İ',
    ' ',
    '  ',
    '.jpg',
    '.tar.gz',
    'C:\\Windows\\',
    'con',
  ),
  // Lone surrogates (JSON can carry them; UTF-8 cannot)
  fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
);
const hostileName = fc.oneof(
  fc.array(hostilePiece, { maxLength: 12 }).map((parts) => parts.join('')),
  // Long names, around and far past the limits
  fc
    .tuple(hostilePiece, fc.integer({ min: 200, max: 1_200 }), hostilePiece)
    .map(([a, n, b]) => a + 'x'.repeat(n) + b),
  fc
    .tuple(fc.integer({ min: 1, max: 1_000 }), fc.constantFrom('😀', 'ا', 'é', 'a'))
    .map(([n, c]) => c.repeat(n) + '.jpg'),
);

const orgSlug = fc.stringMatching(ORG_SLUG_PATTERN);
const ext = fc.constantFrom(...EXTS);
const token = fc.stringMatching(/^[A-Za-z0-9_-]{12}$/);

/**
 * The safe shape of any key `buildKey` accepts: any token of 1 to 64 base64url
 * characters, and a folder segment in either case (folder slugs stored before
 * slugs were lower-cased after reduction may hold capitals; harmless in a key).
 */
const ANY_TOKEN_KEY = new RegExp(
  KEY.source
    .replace('{12}', '{1,64}')
    .replace(
      '(?<folder>[a-z0-9_](?:[a-z0-9._-]*[a-z0-9_])?)',
      '(?<folder>[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?)',
    ),
);

describe('safeDisplayName', () => {
  it('gives a non-empty name of at most 255 characters, with no separators or control characters', () => {
    fc.assert(
      fc.property(hostileName, (input) => {
        const name = safeDisplayName(input);
        expect(name.length).toBeGreaterThan(0);
        expect(name.length).toBeLessThanOrEqual(MAX_NAME_LENGTH);
        expect(name).not.toMatch(FORBIDDEN_IN_NAME);
        expect(name).not.toMatch(LONE_SURROGATE);
        expect(name).toBe(name.trim());
        expect(['.', '..']).not.toContain(name);
      }),
      RUNS,
    );
  });

  it('is idempotent: a safe name stays as it is', () => {
    fc.assert(
      fc.property(hostileName, (input) => {
        const once = safeDisplayName(input);
        expect(safeDisplayName(once)).toBe(once);
      }),
      RUNS,
    );
  });

  it('keeps a name that is already safe, whatever its script', () => {
    const safeChar = fc.oneof(
      fc.constantFrom('a', 'Z', '7', '_', '-', '(', ')', '#', '%', "'", '"', ';', ','),
      fc.constantFrom('é', 'ß', 'ا', 'ש', '中', '😀', '👍🏽', 'Ω'),
    );
    const safe = fc
      .tuple(
        fc.string({ unit: safeChar, minLength: 1, maxLength: 40 }),
        fc.constantFrom('', ' ', '.'),
        fc.string({ unit: safeChar, maxLength: 40 }),
        fc.constantFrom('', '.jpg', '.PDF', '.tar.gz'),
      )
      .map((parts) => parts.join('').normalize('NFC'))
      .filter((s) => s === s.trim() && s !== '.' && s !== '..');
    fc.assert(
      fc.property(safe, (input) => {
        expect(safeDisplayName(input)).toBe(input);
      }),
      RUNS,
    );
  });

  it('keeps the last path segment and the extension of a long name', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('..', 'etc', 'a b', '%2e%2e'), { maxLength: 5 }),
        fc.constantFrom('/', '\\'),
        fc.integer({ min: 250, max: 1_000 }),
        fc.constantFrom('.jpg', '.jpeg', '.pdf', '.heic'),
        (dirs, sep, n, extension) => {
          const name = safeDisplayName([...dirs, `${'n'.repeat(n)}${extension}`].join(sep));
          expect(name.endsWith(extension)).toBe(true);
          expect(name.length).toBe(Math.min(MAX_NAME_LENGTH, n + extension.length));
        },
      ),
      RUNS,
    );
  });

  it('names nothing "file"', () => {
    for (const input of [undefined, null, '', ' ', '.', '..', '../', '/', '\u0000', '\u202e'])
      expect(safeDisplayName(input)).toBe(FALLBACK_NAME);
  });
});

describe('keyBaseName and folderSlug', () => {
  it('reduce any name to [A-Za-z0-9._-], bounded, with no ".." and no leading or trailing dot or dash', () => {
    fc.assert(
      fc.property(hostileName, (input) => {
        const base = keyBaseName(input);
        expect(base).toMatch(BASE);
        expect(base).not.toContain('..');
        expect(base.length).toBeLessThanOrEqual(MAX_KEY_BASE_LENGTH);
        expect(keyBaseName(input)).toBe(base); // deterministic

        const slug = folderSlug(input);
        expect(slug).toMatch(SLUG);
        expect(slug).not.toContain('..');
        expect(slug.length).toBeLessThanOrEqual(MAX_KEY_BASE_LENGTH);
      }),
      RUNS,
    );
  });

  it('keep a plain ASCII name as it is (the key base without its extension)', () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[A-Za-z0-9](?:[.-]?[A-Za-z0-9_]){0,30}$/),
        fc.constantFrom('.jpg', '.png', '.pdf'),
        (base, extension) => {
          expect(keyBaseName(`${base}${extension}`)).toBe(base);
          expect(folderSlug(base)).toBe(base.toLowerCase());
        },
      ),
      RUNS,
    );
  });

  it('is the same for a name and its safe display name', () => {
    fc.assert(
      fc.property(hostileName, (input) => {
        expect(keyBaseName(safeDisplayName(input))).toBe(keyBaseName(input));
      }),
      RUNS,
    );
  });
});

describe('buildKey', () => {
  const parts = fc.record({
    orgSlug,
    folderSlug: fc.option(hostileName.map(folderSlug), { nil: null }),
    baseName: hostileName.map(keyBaseName),
    ext,
  });

  it('builds <org>/[<folder>/]<base>-<token>.<ext> from sanitised parts, and nothing else', () => {
    fc.assert(
      fc.property(parts, token, (p, t) => {
        const key = buildKey(p, t);
        const m = KEY.exec(key);
        expect(m).not.toBeNull();
        expect(m!.groups).toEqual({
          org: p.orgSlug,
          folder: p.folderSlug ?? undefined,
          base: p.baseName,
          token: t,
          ext: p.ext,
        });
        // "/" only where the builder puts it; no "..", no empty segment.
        expect(key.split('/')).toHaveLength(p.folderSlug ? 3 : 2);
        expect(key).not.toContain('..');
        expect(key.startsWith(`${p.orgSlug}/`)).toBe(true);
        expect(key.length).toBeLessThanOrEqual(255);
      }),
      RUNS,
    );
  });

  it('is deterministic for the same token, and random without one', () => {
    fc.assert(
      fc.property(parts, token, (p, t) => {
        expect(buildKey(p, t)).toBe(buildKey({ ...p }, t));
        expect(buildKey(p)).not.toBe(buildKey(p));
        expect(buildKey(p)).toMatch(KEY);
      }),
      RUNS,
    );
    const tokens = new Set(Array.from({ length: 10_000 }, () => randomToken()));
    expect(tokens.size).toBe(10_000);
    for (const t of tokens) expect(t).toMatch(TOKEN);
  });

  it('refuses parts that would make an unsafe key, whatever they are', () => {
    const anything = fc.oneof(hostileName, fc.string({ unit: 'binary', maxLength: 30 }));
    fc.assert(
      fc.property(
        fc.record({
          orgSlug: fc.oneof(orgSlug, anything),
          folderSlug: fc.option(fc.oneof(hostileName.map(folderSlug), anything), { nil: null }),
          baseName: fc.oneof(hostileName.map(keyBaseName), anything),
          ext: fc.oneof(ext, anything),
        }),
        fc.oneof(token, anything),
        (p, t) => {
          let key: string;
          try {
            key = buildKey(p, t);
          } catch (err) {
            expect(err).toBeInstanceOf(TypeError);
            return;
          }
          expect(key).toMatch(ANY_TOKEN_KEY);
          expect(key).not.toContain('..');
        },
      ),
      RUNS,
    );
    expect(() => buildKey({ orgSlug: 'acme', baseName: '../../etc/passwd', ext: 'jpg' })).toThrow(
      TypeError,
    );
    expect(() =>
      buildKey({ orgSlug: 'acme', folderSlug: '..', baseName: 'a', ext: 'jpg' }, 'abc'),
    ).toThrow(TypeError);
  });
});
