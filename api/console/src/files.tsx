/**
 * The files view: folders (create, rename, delete), the organization's files
 * a server page at a time (cursors), searched, filtered and sorted by the
 * server, in a grid or a list (remembered), with thumbnails from signed render
 * URLs minted in batches; selection and its actions (delete, merge PDFs in a
 * dragged order); upload (the lazily loaded Uppy chunk); the preview.
 * Every name and field is rendered as text (Preact escapes it), never HTML.
 */
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import {
  api,
  currentToken,
  problem,
  rawFetch,
  signRenders,
  THUMB,
  type Abilities,
  type Folder,
  type MediaRecord,
  type MediaSort,
  type RootFolder,
} from './api';
import { settle } from './jobs';
import { Preview } from './preview';
import { forgetInterrupted, interruptedUploads, type Interrupted } from './resumable-state';
import type { Uploader, UploadRow } from './upload';
import { Confirm, formatBytes, formatDate, Modal, Status, Pager } from './ui';

const VIEW_KEY = 'media-console-view';
const PAGE_SIZE = 50;
type View = 'grid' | 'list';

const SORTS: { value: NonNullable<MediaSort>; label: string }[] = [
  { value: '-createdAt', label: 'Newest first' },
  { value: 'createdAt', label: 'Oldest first' },
  { value: 'name', label: 'Name A to Z' },
  { value: '-name', label: 'Name Z to A' },
  { value: 'size', label: 'Smallest first' },
  { value: '-size', label: 'Largest first' },
];

const hasThumb = (m: MediaRecord) =>
  m.mimetype.startsWith('image/') || m.mimetype === 'application/pdf';

function rememberedView(): View {
  try {
    return localStorage.getItem(VIEW_KEY) === 'list' ? 'list' : 'grid';
  } catch {
    return 'grid';
  }
}

export function FilesView({ can }: { can: Abilities }) {
  const [folders, setFolders] = useState<Folder[]>([]);
  const [root, setRoot] = useState<RootFolder | null>(null);
  const [folderId, setFolderId] = useState<number | undefined>(undefined);
  const [search, setSearch] = useState('');
  const [query, setQuery] = useState('');
  const [type, setType] = useState('');
  const [sort, setSort] = useState<NonNullable<MediaSort>>('-createdAt');
  const [view, setView] = useState<View>(rememberedView);
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [page, setPage] = useState<{ media: MediaRecord[]; next: string | null }>({
    media: [],
    next: null,
  });
  const [thumbs, setThumbs] = useState<Map<string, string>>(new Map());
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [status, setStatus] = useState({ text: '', error: false });
  const [confirm, setConfirm] = useState<{ message: string; run: () => Promise<void> } | null>(
    null,
  );
  const [preview, setPreview] = useState<MediaRecord | null>(null);
  const [merging, setMerging] = useState<MediaRecord[] | null>(null);
  const [uploads, setUploads] = useState<UploadRow[]>([]);
  const [interrupted, setInterrupted] = useState<Interrupted[]>(interruptedUploads);
  const uploader = useRef<Uploader | null>(null);
  const [newFolder, setNewFolder] = useState('');
  const [moveTo, setMoveTo] = useState('');
  const [dragOver, setDragOver] = useState(false);

  const say = (text: string, error = false) => setStatus({ text, error });

  const loadFolders = useCallback(async () => {
    const { data } = await api.GET('/media/folders');
    if (data) {
      setFolders(data.data.folders);
      setRoot(data.data.root);
    }
  }, []);

  const cursor = cursors[cursors.length - 1];
  // The newest listing asked for; an answer to an earlier one (another sort, folder, search or
  // page) that comes in after it is dropped, never shown over it.
  const newestLoad = useRef(0);
  const loadPage = useCallback(async () => {
    const load = ++newestLoad.current;
    const { data, error, response } = await api.GET('/media', {
      params: {
        query: {
          limit: String(PAGE_SIZE),
          sort,
          ...(folderId === undefined ? {} : { folderId: String(folderId) }),
          ...(query ? { q: query } : {}),
          ...(type ? { type } : {}),
          ...(cursor ? { cursor } : {}),
        },
      },
    });
    if (load !== newestLoad.current) return;
    if (!data) return say(problem(error, response), true);
    setPage({ media: data.data.media, next: data.data.nextCursor });
    // One request signs the page's thumbnails (images, and PDFs' first pages).
    const keys = data.data.media.filter(hasThumb).map((m) => m.key);
    if (keys.length === 0) return;
    const signed = await signRenders(keys, THUMB);
    if (load === newestLoad.current) setThumbs(signed);
  }, [sort, folderId, query, type, cursor]);

  useEffect(() => {
    void loadFolders();
  }, [loadFolders]);
  useEffect(() => {
    void loadPage();
  }, [loadPage]);
  // A new listing starts at its first page, with nothing selected.
  useEffect(() => {
    setCursors([undefined]);
    setSelected(new Set());
  }, [sort, folderId, query, type]);

  const refresh = async () => {
    await Promise.all([loadPage(), loadFolders()]);
  };

  const chooseView = (v: View) => {
    setView(v);
    try {
      localStorage.setItem(VIEW_KEY, v);
    } catch {
      /* not remembered */
    }
  };

  const toggle = (key: string) => {
    const next = new Set(selected);
    if (next.has(key)) next.delete(key);
    else next.add(key);
    setSelected(next);
  };

  // Uppy (the lazily loaded chunk) is made at the first upload and kept: its
  // files can be paused, resumed and retried while the view is open.
  useEffect(() => () => uploader.current?.destroy(), []);
  const upload = async (files: File[]) => {
    if (files.length === 0) return;
    if (!uploader.current) {
      const { createUploader } = await import('./upload');
      uploader.current = createUploader(
        () => currentToken() ?? '',
        (rows) => {
          setUploads(rows);
          setInterrupted(interruptedUploads());
        },
        () => void refresh(),
      );
    }
    await uploader.current.add(files, folderId === root?.id ? undefined : folderId);
  };

  /** An upload interrupted by a reload, given up: ended on the server (tus termination), forgotten here. */
  const discard = async (entry: Interrupted) => {
    const res = await rawFetch(new URL(entry.uploadUrl, location.origin).pathname, {
      method: 'DELETE',
      headers: { 'Tus-Resumable': '1.0.0' },
    });
    forgetInterrupted(entry.storageKey);
    setInterrupted(interruptedUploads());
    say(
      res.status < 300 || res.status === 404 || res.status === 410
        ? `Upload of ${entry.name} discarded`
        : `Upload of ${entry.name} forgotten here; the API answered ${res.status}`,
      res.status >= 300 && res.status !== 404 && res.status !== 410,
    );
  };

  /** The selected files as one ZIP: a signed archive URL (POST /media/archive), downloaded by the browser. */
  const downloadZip = async () => {
    const keys = [...selected];
    const { data, error, response } = await api.POST('/media/archive', {
      body: { mediaKeys: keys, signed: true, expiresIn: 600 },
    });
    if (!data) return say(`No ZIP: ${problem(error, response)}`, true);
    const { url, entries } = (data as { data: { url: string; entries: number } }).data;
    const a = document.createElement('a');
    a.href = url;
    a.download = '';
    a.rel = 'noopener';
    document.body.append(a);
    a.click();
    a.remove();
    say(`ZIP of ${entries} file${entries === 1 ? '' : 's'} downloading`);
  };

  const createFolder = async (e: Event) => {
    e.preventDefault();
    const { error, response } = await api.POST('/media/folders', { body: { name: newFolder } });
    if (error) return say(problem(error, response), true);
    say(`Folder ${newFolder} created`);
    setNewFolder('');
    await loadFolders();
  };

  const renameFolder = async (folder: Folder) => {
    const name = (
      document.getElementById(`rename-${folder.id}`) as HTMLInputElement | null
    )?.value.trim();
    if (!name) return;
    const { error, response } = await api.PATCH('/media/folders/{id}', {
      params: { path: { id: String(folder.id) } },
      body: { name },
    });
    if (error) return say(problem(error, response), true);
    say(`Folder renamed to ${name}`);
    await loadFolders();
  };

  const deleteFolder = (folder: Folder) =>
    setConfirm({
      message: `Delete the folder ${folder.name} and the ${folder.files} files in it?`,
      run: async () => {
        const res = await rawFetch(`/media/folders/${folder.id}?recursive=true`, {
          method: 'DELETE',
        });
        await settle(res, `delete folder ${folder.name}`);
        if (folderId === folder.id) setFolderId(undefined);
        say(`Folder ${folder.name} deleted`);
        await refresh();
      },
    });

  const deleteSelected = () => {
    const keys = [...selected];
    setConfirm({
      message: `Delete ${keys.length} selected file${keys.length === 1 ? '' : 's'}? Deleted files go to the trash (restorable there until purged) unless the organization keeps none.`,
      run: async () => {
        const failures: string[] = [];
        for (const key of keys) {
          const { error, response } = await api.DELETE('/media/record', {
            params: { query: { media: key } },
          });
          if (error) failures.push(`${key}: ${problem(error, response)}`);
        }
        setSelected(new Set());
        say(
          failures.length ? `Not deleted: ${failures.join('; ')}` : `${keys.length} deleted`,
          failures.length > 0,
        );
        await refresh();
      },
    });
  };

  /** The selected files into the chosen folder (POST /media/move: keys stay the same). */
  const moveSelected = async () => {
    const keys = [...selected];
    if (keys.length === 0 || moveTo === '') return;
    const target = Number(moveTo);
    const { error, response } = await api.POST('/media/move', {
      body: { mediaKeys: keys, folderId: target },
    });
    if (error) return say(`Not moved: ${problem(error, response)}`, true);
    setSelected(new Set());
    say(`${keys.length} moved to ${folderName(target)}`);
    await refresh();
  };

  const selectedPdfs = page.media.filter(
    (m) => selected.has(m.key) && m.mimetype === 'application/pdf',
  );

  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragOver(false);
    if (can.write) void upload([...(e.dataTransfer?.files ?? [])]);
  };

  const folderName = (id: number) =>
    id === root?.id ? 'No folder' : (folders.find((f) => f.id === id)?.name ?? String(id));

  return (
    <div class="files">
      <nav class="folders" aria-label="Folders">
        <h2>Folders</h2>
        <ul>
          <li>
            <button
              type="button"
              aria-current={folderId === undefined}
              onClick={() => setFolderId(undefined)}
            >
              All files
            </button>
          </li>
          {root && (
            <li>
              <button
                type="button"
                aria-current={folderId === root.id}
                onClick={() => setFolderId(root.id)}
              >
                No folder ({root.files})
              </button>
            </li>
          )}
          {folders.map((f) => (
            <li key={f.id}>
              <button
                type="button"
                aria-current={folderId === f.id}
                onClick={() => setFolderId(f.id)}
              >
                {f.name} ({f.files})
              </button>
              {can.write && (
                <span class="row">
                  <label class="sr-only" for={`rename-${f.id}`}>
                    New name for {f.name}
                  </label>
                  <input id={`rename-${f.id}`} defaultValue={f.name} size={10} />
                  <button type="button" onClick={() => void renameFolder(f)}>
                    Rename
                  </button>
                </span>
              )}
              {can.delete && (
                <button type="button" class="danger" onClick={() => deleteFolder(f)}>
                  Delete folder {f.name}
                </button>
              )}
            </li>
          ))}
        </ul>
        {can.write && (
          <form onSubmit={(e) => void createFolder(e)}>
            <label for="new-folder">New folder</label>
            <input
              id="new-folder"
              value={newFolder}
              required
              maxLength={200}
              onInput={(e) => setNewFolder(e.currentTarget.value)}
            />
            <button type="submit">Create folder</button>
          </form>
        )}
      </nav>

      <section
        class={dragOver ? 'listing drag-over' : 'listing'}
        aria-label="Files"
        onDragOver={(e) => {
          if (!can.write || !e.dataTransfer?.types.includes('Files')) return;
          e.preventDefault();
          setDragOver(true);
        }}
        onDragLeave={() => setDragOver(false)}
        onDrop={onDrop}
      >
        <form
          class="toolbar"
          role="search"
          onSubmit={(e) => {
            e.preventDefault();
            setQuery(search.trim());
          }}
        >
          <label for="search">Search names</label>
          <input
            id="search"
            type="search"
            value={search}
            maxLength={255}
            onInput={(e) => setSearch(e.currentTarget.value)}
          />
          <button type="submit">Search</button>
          <label for="type">Type</label>
          <select id="type" value={type} onChange={(e) => setType(e.currentTarget.value)}>
            <option value="">All types</option>
            <option value="image">Images</option>
            <option value="pdf">PDFs</option>
          </select>
          <label for="sort">Sort</label>
          <select
            id="sort"
            value={sort}
            onChange={(e) => setSort(e.currentTarget.value as NonNullable<MediaSort>)}
          >
            {SORTS.map((s) => (
              <option key={s.value} value={s.value}>
                {s.label}
              </option>
            ))}
          </select>
          <span role="group" aria-label="View">
            <button type="button" aria-pressed={view === 'grid'} onClick={() => chooseView('grid')}>
              Grid
            </button>
            <button type="button" aria-pressed={view === 'list'} onClick={() => chooseView('list')}>
              List
            </button>
          </span>
        </form>

        {can.write && (
          <div class="upload">
            <label for="upload-input">Upload files (or drop them here)</label>
            <input
              id="upload-input"
              type="file"
              multiple
              onChange={(e) => {
                const input = e.currentTarget;
                void upload([...(input.files ?? [])]).then(() => (input.value = ''));
              }}
            />
            <ul class="upload-progress" aria-label="Uploads">
              {uploads.map((u) => (
                <li key={u.id} data-state={u.state}>
                  <span class="name">{u.name}</span>:{' '}
                  <span class="upload-state">{uploadText(u)}</span>
                  {(u.state === 'uploading' ||
                    u.state === 'paused' ||
                    u.state === 'retrying' ||
                    u.state === 'waiting') && (
                    <progress aria-label={`Progress of ${u.name}`} max={100} value={u.percent} />
                  )}
                  {(u.state === 'uploading' || u.state === 'retrying' || u.state === 'waiting') && (
                    <button type="button" onClick={() => uploader.current?.pauseResume(u.id)}>
                      Pause <span class="sr-only">{u.name}</span>
                    </button>
                  )}
                  {u.state === 'paused' && (
                    <button type="button" onClick={() => uploader.current?.pauseResume(u.id)}>
                      Resume <span class="sr-only">{u.name}</span>
                    </button>
                  )}
                  {u.state === 'failed' && (
                    <button type="button" onClick={() => uploader.current?.retry(u.id)}>
                      Retry <span class="sr-only">{u.name}</span>
                    </button>
                  )}
                </li>
              ))}
            </ul>
            {interrupted.length > 0 && uploads.length === 0 && (
              <div class="interrupted" role="region" aria-label="Interrupted uploads">
                <p>
                  Unfinished uploads from before the page was reloaded: choose or drop the same file
                  again (in the same folder) to continue where it stopped.
                </p>
                <ul>
                  {interrupted.map((i) => (
                    <li key={i.storageKey}>
                      <span class="name">{i.name}</span>
                      {i.size !== null && <span> ({formatBytes(i.size)})</span>}{' '}
                      <button type="button" onClick={() => void discard(i)}>
                        Discard <span class="sr-only">{i.name}</span>
                      </button>
                    </li>
                  ))}
                </ul>
              </div>
            )}
          </div>
        )}

        <div class="selection row" aria-label="Selection">
          <span>{selected.size} selected</span>
          <button
            type="button"
            onClick={() =>
              setSelected(
                selected.size === page.media.length
                  ? new Set()
                  : new Set(page.media.map((m) => m.key)),
              )
            }
          >
            {selected.size === page.media.length && page.media.length > 0
              ? 'Select none'
              : 'Select all on this page'}
          </button>
          {selected.size > 0 && (
            <button type="button" onClick={() => void downloadZip()}>
              Download as ZIP
            </button>
          )}
          {can.delete && selected.size > 0 && (
            <button type="button" class="danger" onClick={deleteSelected}>
              Delete selected
            </button>
          )}
          {can.write && selected.size > 0 && root && (
            <span class="move">
              <label>
                Move to{' '}
                <select value={moveTo} onChange={(e) => setMoveTo(e.currentTarget.value)}>
                  <option value="">Choose a folder</option>
                  <option value={String(root.id)}>No folder</option>
                  {folders.map((f) => (
                    <option key={f.id} value={String(f.id)}>
                      {f.name}
                    </option>
                  ))}
                </select>
              </label>
              <button type="button" disabled={moveTo === ''} onClick={() => void moveSelected()}>
                Move selected
              </button>
            </span>
          )}
          {can.write && selectedPdfs.length >= 2 && (
            <button type="button" onClick={() => setMerging(selectedPdfs)}>
              Merge selected PDFs
            </button>
          )}
        </div>

        <Status {...status} />

        {view === 'grid' ? (
          <ul class="grid" aria-label="Files">
            {page.media.map((m) => (
              <li key={m.key} class="card" data-key={m.key}>
                <input
                  type="checkbox"
                  aria-label={`Select ${m.name}`}
                  checked={selected.has(m.key)}
                  onChange={() => toggle(m.key)}
                />
                <button type="button" class="open" onClick={() => setPreview(m)}>
                  {thumbs.get(m.key) ? (
                    <img class="thumb" src={thumbs.get(m.key)} alt="" loading="lazy" />
                  ) : (
                    <span class="thumb placeholder">{m.mimetype}</span>
                  )}
                  <span class="name">{m.name}</span>
                </button>
                <span class="meta">{formatBytes(m.bytes)}</span>
              </li>
            ))}
          </ul>
        ) : (
          <table class="list" aria-label="Files">
            <thead>
              <tr>
                <th scope="col">
                  <span class="sr-only">Selected</span>
                </th>
                <th scope="col">Preview</th>
                <SortHeader label="Name" field="name" sort={sort} setSort={setSort} />
                <SortHeader label="Size" field="size" sort={sort} setSort={setSort} />
                <SortHeader label="Created" field="createdAt" sort={sort} setSort={setSort} />
                <th scope="col">Type</th>
                <th scope="col">Folder</th>
              </tr>
            </thead>
            <tbody>
              {page.media.map((m) => (
                <tr key={m.key} data-key={m.key}>
                  <td>
                    <input
                      type="checkbox"
                      aria-label={`Select ${m.name}`}
                      checked={selected.has(m.key)}
                      onChange={() => toggle(m.key)}
                    />
                  </td>
                  <td>
                    {thumbs.get(m.key) && (
                      <img class="thumb small" src={thumbs.get(m.key)} alt="" loading="lazy" />
                    )}
                  </td>
                  <td>
                    <button type="button" class="open name" onClick={() => setPreview(m)}>
                      {m.name}
                    </button>
                  </td>
                  <td>{formatBytes(m.bytes)}</td>
                  <td>{formatDate(m.createdAt)}</td>
                  <td>{m.mimetype}</td>
                  <td>{folderName(m.folderId)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {page.media.length === 0 && <p>No files here.</p>}

        <Pager cursors={cursors} next={page.next} onChange={setCursors} />
      </section>

      {preview && (
        <Preview
          record={preview}
          can={can}
          onClose={() => setPreview(null)}
          onChanged={() => void refresh()}
        />
      )}
      {merging && (
        <Merge
          files={merging}
          folderId={folderId === root?.id ? undefined : folderId}
          onClose={() => setMerging(null)}
          onDone={(name) => {
            setMerging(null);
            setSelected(new Set());
            say(`Merged into ${name}`);
            void refresh();
          }}
        />
      )}
      {confirm && (
        <Confirm
          message={confirm.message}
          confirmLabel="Delete"
          onAnswer={(yes) => {
            const { run } = confirm;
            setConfirm(null);
            if (yes) run().catch((err: Error) => say(err.message, true));
          }}
        />
      )}
    </div>
  );
}

function uploadText(u: UploadRow): string {
  switch (u.state) {
    case 'uploading':
      return `${u.percent}%`;
    case 'paused':
      return `paused at ${u.percent}%`;
    case 'retrying':
      return `${u.percent}%, ${u.message ?? 'retrying'}`;
    case 'refused':
      return `refused: ${u.message ?? ''}`;
    case 'failed':
      return `failed at ${u.percent}%: ${u.message ?? ''} (Retry continues from there)`;
    case 'uploaded':
    case 'waiting':
      return u.state;
  }
}

/** A list column header that sorts by its field, one way then the other. */
function SortHeader(props: {
  label: string;
  field: 'name' | 'size' | 'createdAt';
  sort: NonNullable<MediaSort>;
  setSort: (s: NonNullable<MediaSort>) => void;
}) {
  const { field, sort } = props;
  const active = sort === field ? 'ascending' : sort === `-${field}` ? 'descending' : 'none';
  return (
    <th scope="col" aria-sort={active}>
      <button type="button" onClick={() => props.setSort(sort === field ? `-${field}` : field)}>
        {props.label}
        {active === 'ascending' ? ' ▲' : active === 'descending' ? ' ▼' : ''}
      </button>
    </th>
  );
}

/** Merging PDFs: the order set by dragging the list (or the Up/Down buttons, from the keyboard). */
function Merge(props: {
  files: MediaRecord[];
  folderId: number | undefined;
  onClose: () => void;
  onDone: (name: string) => void;
}) {
  const [order, setOrder] = useState(props.files);
  const [dragging, setDragging] = useState<number | null>(null);
  const [status, setStatus] = useState({ text: '', error: false });
  const move = (from: number, to: number) => {
    if (to < 0 || to >= order.length || from === to) return;
    const next = [...order];
    const [item] = next.splice(from, 1);
    next.splice(to, 0, item!);
    setOrder(next);
  };
  const merge = async () => {
    setStatus({ text: 'Merging…', error: false });
    const form = new FormData();
    for (const m of order) form.append('mediaKeys', m.key);
    if (props.folderId !== undefined) form.append('folderId', String(props.folderId));
    try {
      const res = await rawFetch('/media/merge-pdfs', { method: 'POST', body: form });
      const record = await settle(res, `merge ${order.length} PDFs`);
      props.onDone(String(record.name ?? record.key));
    } catch (err) {
      setStatus({ text: (err as Error).message, error: true });
    }
  };
  return (
    <Modal label="Merge PDFs" onClose={props.onClose}>
      <p>Drag the files into the order of the merged PDF.</p>
      <ol class="merge-order" aria-label="Merge order">
        {order.map((m, i) => (
          <li
            key={m.key}
            draggable
            data-key={m.key}
            class={dragging === i ? 'dragging' : ''}
            onDragStart={(e) => {
              setDragging(i);
              e.dataTransfer?.setData('text/plain', String(i));
            }}
            onDragOver={(e) => e.preventDefault()}
            onDrop={(e) => {
              e.preventDefault();
              const from = Number(e.dataTransfer?.getData('text/plain') ?? dragging);
              move(from, i);
              setDragging(null);
            }}
            onDragEnd={() => setDragging(null)}
          >
            <span class="name">{m.name}</span>
            <button type="button" aria-label={`Move ${m.name} up`} onClick={() => move(i, i - 1)}>
              Up
            </button>
            <button type="button" aria-label={`Move ${m.name} down`} onClick={() => move(i, i + 1)}>
              Down
            </button>
          </li>
        ))}
      </ol>
      <button type="button" onClick={() => void merge()}>
        Merge {order.length} PDFs
      </button>
      <Status {...status} />
    </Modal>
  );
}
