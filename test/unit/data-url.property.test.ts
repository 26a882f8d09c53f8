/**
 * Property-based tests of the data URL parser (shared/media/data-url.ts), with
 * fast-check: every base64 data URL round-trips its bytes and declared type,
 * the decoded size is known exactly before decoding, and anything else is
 * refused with a DataUrlError, never another exception, in bounded time.
 */
import fc from 'fast-check';
import { DataUrlError, parseDataUrl } from '../../shared/media/data-url';

const RUNS = { numRuns: 2_000 };

const token = fc.stringMatching(/^[A-Za-z0-9!#$&^_.+-]{1,20}$/);
/** A media type as clients write it (any case, sometimes with spaces around it). */
const mediaType = fc
  .tuple(token, token, fc.constantFrom('', ' '))
  .map(([type, subtype, pad]) => `${pad}${type}/${subtype}${pad}`);
const params = fc.array(
  fc.tuple(token, fc.stringMatching(/^[A-Za-z0-9._=-]{0,12}$/)).map(([k, v]) => `;${k}=${v}`),
  { maxLength: 3 },
);
const bytes = fc.uint8Array({ minLength: 1, maxLength: 3_000 }).map((b) => Buffer.from(b));

/** Ways encoders write the same base64: padded, unpadded, MIME line breaks, stray spaces. */
const layout = fc.constantFrom(
  (b64: string) => b64,
  (b64: string) => b64.replace(/=+$/, ''),
  (b64: string) => b64.replace(/.{1,76}/g, '$&\r\n'),
  (b64: string) => b64.replace(/.{1,64}/g, '$&\n'),
  (b64: string) => ` ${b64.replace(/(.{4})/g, '$1 ')} `,
);

/** Runs the parser; anything it throws must be a DataUrlError. */
function outcome(input: unknown): ReturnType<typeof parseDataUrl> | DataUrlError {
  try {
    return parseDataUrl(input);
  } catch (err) {
    expect(err).toBeInstanceOf(DataUrlError);
    return err as DataUrlError;
  }
}

describe('parseDataUrl', () => {
  it('round-trips any bytes and declared type it accepts', () => {
    fc.assert(
      fc.property(
        bytes,
        mediaType,
        params,
        fc.constantFrom('base64', 'BASE64', 'Base64'),
        layout,
        (data, type, extra, b64word, lay) => {
          const url = `data:${type}${extra.join('')};${b64word},${lay(data.toString('base64'))}`;
          const parsed = parseDataUrl(url);
          expect(parsed.declaredType).toBe(type.trim().toLowerCase());
          expect(parsed.decodedSize).toBe(data.length);
          expect(Buffer.from(parsed.base64, 'base64').equals(data)).toBe(true);
          expect(parsed.base64).toMatch(/^[A-Za-z0-9+/]+={0,2}$/);
        },
      ),
      RUNS,
    );
  });

  it('accepts an empty declared type (data:;base64,...)', () => {
    fc.assert(
      fc.property(bytes, (data) => {
        const parsed = parseDataUrl(`data:;base64,${data.toString('base64')}`);
        expect(parsed.declaredType).toBe('');
        expect(Buffer.from(parsed.base64, 'base64').equals(data)).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it('refuses a data URL without data, without base64, or without its prefix', () => {
    fc.assert(
      fc.property(bytes, mediaType, (data, type) => {
        const b64 = data.toString('base64');
        for (const bad of [
          `data:${type};base64,`,
          `data:${type};base64, \r\n `,
          `data:${type},${b64}`, // percent-encoded form, not accepted
          `data:${type};charset=utf-8,${b64}`,
          b64,
          `${type};base64,${b64}`,
          `date:${type};base64,${b64}`,
        ]) {
          expect(outcome(bad)).toBeInstanceOf(DataUrlError);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('refuses base64 with a character outside the alphabet, or broken padding', () => {
    const junk = fc.constantFrom('@', '-', '_', '%', '!', '=A', '*', '\u0000', 'é', '😀', '.');
    fc.assert(
      fc.property(bytes, junk, fc.nat(), (data, bad, at) => {
        const b64 = data.toString('base64').replace(/=+$/, '');
        const i = at % (b64.length + 1);
        const result = outcome(`data:image/png;base64,${b64.slice(0, i)}${bad}${b64.slice(i)}`);
        expect(result).toBeInstanceOf(DataUrlError);
      }),
      RUNS,
    );
    for (const bad of ['A', 'AAAAA', 'A=', 'AA=', 'AAA==', '==', '====', 'AA==AA==', 'AAAA===']) {
      expect(outcome(`data:image/png;base64,${bad}`)).toBeInstanceOf(DataUrlError);
    }
  });

  it('throws only DataUrlError on arbitrary input, and whatever it accepts decodes to the size it announced', () => {
    const b64ish = fc.string({
      unit: fc.constantFrom(...'AQw+/=9 \n\r\t-_@.'.split('')),
      maxLength: 200,
    });
    const arbitrary = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 200 }),
      fc.string({ unit: 'binary', maxLength: 200 }).map((s) => `data:${s}`),
      fc.tuple(fc.string({ maxLength: 40 }), b64ish).map(([t, d]) => `data:${t};base64,${d}`),
      fc.tuple(fc.string({ maxLength: 40 }), b64ish).map(([t, d]) => `DATA:${t};BASE64,${d}`),
      fc
        .tuple(fc.constantFrom('image/png', 'application/pdf', ''), b64ish)
        .map(([t, d]) => `data:${t};base64,${d}`),
    );
    fc.assert(
      fc.property(arbitrary, (input) => {
        const result = outcome(input);
        if (result instanceof DataUrlError) return;
        expect(Buffer.from(result.base64, 'base64').length).toBe(result.decodedSize);
        expect(result.decodedSize).toBeGreaterThan(0);
        expect(result.base64).toMatch(/^[A-Za-z0-9+/]+={0,2}$/);
      }),
      { numRuns: 5_000 },
    );
  });

  it('refuses anything that is not a string', () => {
    fc.assert(
      fc.property(
        fc.anything().filter((v) => typeof v !== 'string'),
        (input) => {
          expect(outcome(input)).toBeInstanceOf(DataUrlError);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('answers hostile inputs in bounded time', () => {
    const hostile = [
      `data:${';'.repeat(100_000)}`,
      `data:${'a;'.repeat(100_000)}base64,AAAA`,
      `data:image/png;base64,${'A'.repeat(8_000_000)}=`,
      `data:image/png;base64,${' '.repeat(1_000_000)}`,
      `data:image/png;base64,${'AAAA'.repeat(2_000_000)}@`,
      `data:${'x'.repeat(1_000_000)}`,
    ];
    for (const input of hostile) {
      const started = process.hrtime.bigint();
      outcome(input);
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      // Milliseconds each when linear; a quadratic pass over 100,000 characters would take
      // minutes. Wide, for a loaded machine (2.1 s was seen beside other test files).
      expect(ms).toBeLessThan(10_000);
    }
  });
});
