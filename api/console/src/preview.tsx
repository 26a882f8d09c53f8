/**
 * One file: an image at screen size, a PDF page by page (each page a signed
 * render: the raw PDF is never shown inline on the API's origin), the record's
 * fields, the image metadata (EXIF camera, date and GPS), and the actions the
 * token may take (copy a signed URL with an expiry preset, download, convert,
 * delete).
 */
import { useEffect, useState } from 'preact/hooks';
import {
  api,
  problem,
  rawFetch,
  signDownload,
  signRenders,
  type Abilities,
  type MediaRecord,
} from './api';
import { readExif, type ExifSummary } from './exif';
import { settle } from './jobs';
import { Confirm, formatBytes, formatDate, Modal, Status } from './ui';

const EXPIRY_PRESETS = [
  { label: '1 hour', seconds: 3600 },
  { label: '1 day', seconds: 86_400 },
  { label: '7 days', seconds: 604_800 },
];
const FORMATS = ['webp', 'png', 'jpeg', 'avif', 'gif', 'tiff'];

/** A metadata value as text. */
const asText = (v: unknown) =>
  typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v);

export function Preview(props: {
  record: MediaRecord;
  can: Abilities;
  onClose: () => void;
  onChanged: () => void;
}) {
  const m = props.record;
  const isPdf = m.mimetype === 'application/pdf';
  const isImage = m.mimetype.startsWith('image/');
  const pages = (m as { pages?: number }).pages;
  const [page, setPage] = useState(1);
  const [src, setSrc] = useState<string | null>(null);
  const [renderFailed, setRenderFailed] = useState(false);
  const [expiry, setExpiry] = useState('3600');
  const [custom, setCustom] = useState('');
  const [signed, setSigned] = useState('');
  const [format, setFormat] = useState('webp');
  const [meta, setMeta] = useState<Record<string, unknown> | null>(null);
  const [exif, setExif] = useState<ExifSummary | null>(null);
  const [status, setStatus] = useState({ text: '', error: false });
  const [confirming, setConfirming] = useState(false);
  const say = (text: string, error = false) => setStatus({ text, error });

  useEffect(() => {
    if (!isPdf && !isImage) return;
    setRenderFailed(false);
    const render = {
      w: 1200,
      h: 1200,
      fit: 'inside',
      format: 'webp',
      ...(isPdf ? { page } : {}),
    };
    void signRenders([m.key], render).then((urls) => setSrc(urls.get(m.key) ?? null));
  }, [m.key, page, isPdf, isImage]);

  const seconds = () => (expiry === 'custom' ? Number(custom) : Number(expiry));

  const copySigned = async () => {
    try {
      const url = await signDownload(m.key, seconds());
      setSigned(url);
      try {
        await navigator.clipboard.writeText(url);
        say('Signed URL copied');
      } catch {
        say('Signed URL below (the clipboard was not available)');
      }
    } catch (err) {
      say((err as Error).message, true);
    }
  };

  const download = async () => {
    try {
      const a = document.createElement('a');
      a.href = await signDownload(m.key, 300);
      a.download = m.name;
      a.rel = 'noopener';
      a.click();
    } catch (err) {
      say((err as Error).message, true);
    }
  };

  const convert = async () => {
    say(`Converting to ${format}…`);
    try {
      const res = await rawFetch('/media/convert', {
        method: 'POST',
        json: { mediaKey: m.key, format },
      });
      const record = await settle(res, `convert ${m.name} to ${format}`);
      say(`Converted: ${String(record.key)}`);
      props.onChanged();
    } catch (err) {
      say((err as Error).message, true);
    }
  };

  const loadMetadata = async () => {
    say('Reading metadata…');
    try {
      const res = await rawFetch(`/media/metadata?mediaKey=${encodeURIComponent(m.key)}`, {
        method: 'GET',
      });
      const data = await settle(res, `metadata of ${m.name}`);
      setMeta(data);
      const raw = data.exif as { data?: number[] } | undefined;
      setExif(raw?.data ? readExif(Uint8Array.from(raw.data)) : {});
      say('');
    } catch (err) {
      say((err as Error).message, true);
    }
  };

  const remove = async () => {
    const { error, response } = await api.DELETE('/media/record', {
      params: { query: { media: m.key } },
    });
    if (error) return say(problem(error, response), true);
    props.onChanged();
    props.onClose();
  };

  const fields: [string, string][] = [
    ['Name', m.name],
    ['Key', m.key],
    ['Type', m.mimetype],
    ['Size', `${formatBytes(m.bytes)} (${m.bytes} bytes)`],
    ['Created', formatDate(m.createdAt)],
    ['Updated', formatDate(m.updatedAt)],
    ['Id', String(m.id)],
    ['Checksum', m.checksum],
    ...(pages ? [['Pages', String(pages)] as [string, string]] : []),
  ];

  return (
    <Modal label={`Preview of ${m.name}`} onClose={props.onClose}>
      <div class="preview">
        <div class="stage">
          {src && !renderFailed ? (
            <img
              class="preview-image"
              src={src}
              alt={isPdf ? `Page ${page} of ${m.name}` : m.name}
              onError={() => setRenderFailed(true)}
            />
          ) : (
            <p>
              {renderFailed
                ? 'No preview: the service could not render this file.'
                : 'No preview for this type.'}
            </p>
          )}
          {isPdf && (
            <div class="row">
              <button type="button" disabled={page <= 1} onClick={() => setPage(page - 1)}>
                Previous page
              </button>
              <span>
                Page {page}
                {pages ? ` of ${pages}` : ''}
              </span>
              <button
                type="button"
                disabled={pages !== undefined && page >= pages}
                onClick={() => setPage(page + 1)}
              >
                Next page
              </button>
            </div>
          )}
        </div>
        <div class="details">
          <dl>
            {fields.map(([k, v]) => (
              <div key={k}>
                <dt>{k}</dt>
                <dd>{v}</dd>
              </div>
            ))}
          </dl>
          {isImage && !meta && (
            <button type="button" onClick={() => void loadMetadata()}>
              Show image metadata
            </button>
          )}
          {meta && (
            <dl class="metadata" aria-label="Image metadata">
              {['format', 'width', 'height', 'space', 'orientation', 'density', 'hasAlpha'].map(
                (k) =>
                  meta[k] !== undefined && (
                    <div key={k}>
                      <dt>{k}</dt>
                      <dd>{asText(meta[k])}</dd>
                    </div>
                  ),
              )}
              {exif?.make && (
                <div>
                  <dt>Camera</dt>
                  <dd>{`${exif.make} ${exif.model ?? ''}`}</dd>
                </div>
              )}
              {exif?.taken && (
                <div>
                  <dt>Taken</dt>
                  <dd>{exif.taken}</dd>
                </div>
              )}
              {exif?.gps && (
                <div>
                  <dt>GPS</dt>
                  <dd>
                    {`${exif.gps.latitude.toFixed(6)}, ${exif.gps.longitude.toFixed(6)}`}
                    {exif.gps.altitude !== undefined
                      ? ` (altitude ${exif.gps.altitude.toFixed(0)} m)`
                      : ''}
                  </dd>
                </div>
              )}
            </dl>
          )}

          <fieldset>
            <legend>Signed URL</legend>
            <label for="expiry">Expires in</label>
            <select id="expiry" value={expiry} onChange={(e) => setExpiry(e.currentTarget.value)}>
              {EXPIRY_PRESETS.map((p) => (
                <option key={p.seconds} value={String(p.seconds)}>
                  {p.label}
                </option>
              ))}
              <option value="custom">Custom</option>
            </select>
            {expiry === 'custom' && (
              <>
                <label for="custom-expiry">Seconds</label>
                <input
                  id="custom-expiry"
                  type="number"
                  min={1}
                  value={custom}
                  onInput={(e) => setCustom(e.currentTarget.value)}
                />
              </>
            )}
            <button type="button" onClick={() => void copySigned()}>
              Copy signed URL
            </button>
            {signed && (
              <>
                <label for="signed-url">Signed URL</label>
                <input id="signed-url" readOnly value={signed} />
              </>
            )}
          </fieldset>
          <div class="row">
            <button type="button" onClick={() => void download()}>
              Download
            </button>
            {props.can.write && isImage && (
              <>
                <label for="convert-format">Convert to</label>
                <select
                  id="convert-format"
                  value={format}
                  onChange={(e) => setFormat(e.currentTarget.value)}
                >
                  {FORMATS.map((f) => (
                    <option key={f}>{f}</option>
                  ))}
                </select>
                <button type="button" onClick={() => void convert()}>
                  Convert
                </button>
              </>
            )}
            {props.can.delete && (
              <button type="button" class="danger" onClick={() => setConfirming(true)}>
                Delete
              </button>
            )}
          </div>
          <Status {...status} />
        </div>
      </div>
      {confirming && (
        <Confirm
          message={`Delete ${m.name}? This cannot be undone.`}
          confirmLabel="Delete"
          onAnswer={(yes) => {
            setConfirming(false);
            if (yes) void remove();
          }}
        />
      )}
    </Modal>
  );
}
