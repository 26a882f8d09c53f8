/**
 * api/openapi.yaml's format vocabulary held to the formats table and the
 * render parameters' schema: the render and sign format, fit and metadata
 * enums, the sign object's parameter names, the records' types and key
 * extensions, the decoders the metadata names, and the default qualities the
 * convert request describes. A format added to the table fails here until
 * the spec says it too.
 */
import {
  CONVERT_FORMAT_NAMES,
  CONVERT_FORMATS,
  IMAGE_DECODERS,
  KNOWN_MIME_TYPES,
  MEDIA_FORMATS,
  outputOf,
} from '../../../shared/media/formats';
import { RENDER_FITS } from '../../../shared/media/render-options';
import { RENDER_FORMAT_NAMES, RENDER_PARAM_NAMES } from '../../../shared/media/render-params';
import { deref, nodeAt } from '../../support/openapi';

type Schema = { enum?: unknown[]; pattern?: string; description?: string; default?: unknown };
type Parameter = { name: string; in: string; schema?: Schema };

const schemaAt = (pointer: string) => deref(nodeAt(pointer), pointer).node as Schema;

/** The render operation's query parameters, by name. */
function renderQuery(): Map<string, Schema> {
  const pointer = '/paths/~1media~1render/get/parameters';
  const params = (nodeAt(pointer) as unknown[]).map(
    (p, i) => deref(p, `${pointer}/${i}`).node as unknown as Parameter,
  );
  return new Map(params.filter((p) => p.in === 'query').map((p) => [p.name, p.schema ?? {}]));
}

describe('the spec names the formats of the table', () => {
  it('GET /media/render: every parameter, with the format, fit and metadata values', () => {
    const query = renderQuery();
    for (const name of RENDER_PARAM_NAMES) expect([name, query.has(name)]).toEqual([name, true]);
    expect(query.get('format')?.enum).toEqual([...RENDER_FORMAT_NAMES]);
    expect(query.get('format')?.default).toBe('auto');
    expect(query.get('fit')?.enum).toEqual([...RENDER_FITS]);
    expect([...(query.get('metadata')?.enum ?? [])].sort()).toEqual(['keep', 'strip']);
  });

  it('SignRenderOptions: exactly the render parameters, with the same values', () => {
    const sign = nodeAt('/components/schemas/SignRenderOptions') as {
      properties: Record<string, Schema>;
    };
    expect(Object.keys(sign.properties)).toEqual([...RENDER_PARAM_NAMES]);
    expect(sign.properties.format?.enum).toEqual([...RENDER_FORMAT_NAMES]);
    expect(sign.properties.fit?.enum).toEqual([...RENDER_FITS]);
    expect([...(sign.properties.metadata?.enum ?? [])].sort()).toEqual(['keep', 'strip']);
  });

  it('ConvertRequest: the default quality of each lossy format, the others ignoring it', () => {
    const quality = schemaAt('/components/schemas/ConvertRequest/properties/quality');
    const text = (quality.description ?? '').replace(/\s+/g, ' ');
    const [used, ignored] = text.split('ignored');
    for (const format of CONVERT_FORMATS) {
      const q = outputOf(format).quality;
      if (q === null) expect([format, ignored?.includes(format)]).toEqual([format, true]);
      else expect([format, used?.includes(`${format} (default ${q})`)]).toEqual([format, true]);
    }
    const description = schemaAt('/components/schemas/ConvertRequest/properties/format');
    for (const name of CONVERT_FORMAT_NAMES)
      expect(description.description).toContain(`\`${name}\``);
  });

  it("POST /media/convert's encoder settings: one row per format, with the table's quality and effort", () => {
    const description = nodeAt('/paths/~1media~1convert/post/description') as string;
    const rows = [...description.matchAll(/^\s*\| (\w+) \| (.*) \|$/gm)]
      .map((m) => [m[1]!, m[2]!] as const)
      .filter(([format]) => format !== 'format');
    expect(rows.map(([format]) => format)).toEqual([...CONVERT_FORMATS]);
    for (const [format, settings] of rows) {
      const { quality, effort } = outputOf(format as (typeof CONVERT_FORMATS)[number]);
      const expected = [
        quality === null ? '`quality` ignored' : `quality ${quality} unless given`,
        // The first tier's effort, then each next one's above the tier before it.
        ...(effort ?? []).map((tier, i) =>
          i === 0
            ? `effort ${tier.effort}`
            : `${tier.effort} above ${effort![i - 1]!.upTo / 1_000_000} MP`,
        ),
      ];
      expect([format, expected.filter((text) => !settings.includes(text))]).toEqual([format, []]);
    }
  });

  it("MediaRecord: the table's types, and its key extensions in the key pattern", () => {
    const fields = '/components/schemas/MediaRecordFields/properties';
    expect(schemaAt(`${fields}/mimetype`).enum).toEqual([...KNOWN_MIME_TYPES]);
    const pattern = schemaAt(`${fields}/key`).pattern ?? '';
    const extensions = /\\\.\(\?:([a-z0-9|]+)\)/.exec(pattern)?.[1]?.split('|');
    expect(extensions).toEqual(Object.values(MEDIA_FORMATS).map((f) => f.ext));
  });

  it("ImageMetadata.format: sharp's decoders of the table's images, and pdf (PDFs' metadata)", () => {
    expect(schemaAt('/components/schemas/ImageMetadata/properties/format').enum).toEqual([
      ...IMAGE_DECODERS,
      'pdf',
    ]);
  });
});
