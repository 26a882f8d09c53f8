/**
 * Folders: as uploads name them (`folder`, a name, finds or creates the
 * organization's folder of that name; `folderId` must name one of its folders,
 * 404 otherwise; both given must agree, 400 otherwise), and as resources
 * (list with each folder's files and bytes, create, get, rename, delete).
 * A rename changes the name (and the folder's part of new keys), never an
 * existing key. Deleting a folder that holds files is refused (409) unless
 * asked to be recursive: then a job deletes its files and the folder. A
 * delete holds the folder first (no lookup finds it from then on), then
 * looks for its files, so an upload committing into it at that moment either
 * is seen (409, or deleted with the rest) or sees the hold and undoes itself
 * (shared/repositories/folders.repository.ts).
 *
 * Files in no folder belong to the organization's root folder: it has an
 * integer id (the `folderId` such files answer) and no name. `folderId` may
 * name it wherever a folder id is taken (the file then goes in no folder; a
 * listing then shows the files in no folder); the list shows it apart, as
 * `root`, and it cannot be read, renamed or deleted as a folder (409
 * ROOT_FOLDER).
 */
import { Errors } from '@shared/errors';
import type { EventOutbox } from '@shared/events/outbox';
import type { Folder, FoldersRepository } from '@shared/repositories/folders.repository';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { Caller } from '../domain/caller';
import type { JobAnswer, JobsService } from './jobs.service';

/** A folder as the API shows it. */
export interface FolderView {
  id: number;
  name: string;
  files: number;
  /** Bytes of its files. */
  bytes: number;
  createdAt: string;
  updatedAt: string;
}

/** The root folder as the list shows it: its id, and the files in no folder. */
export interface RootFolderView {
  id: number;
  files: number;
  bytes: number;
}

/** The most a folder name may hold. */
export const MAX_FOLDER_NAME = 200;

/** `folder` (a name) and/or `folderId` as they came in the request. */
export interface FolderSpec {
  folder?: string | undefined;
  folderId?: string | undefined;
}

export class FoldersService {
  constructor(
    private readonly deps: {
      folders: FoldersRepository;
      media: MediaRepository;
      /** For a recursive delete (a job); absent where only `resolve` is used. */
      jobs?: JobsService;
      /** Records a removed folder's event (the dispatcher's sweep does, should this fail). */
      events?: Pick<EventOutbox, 'promoteFolders'>;
    },
  ) {}

  async list(
    caller: Pick<Caller, 'organization'>,
  ): Promise<{ folders: FolderView[]; root: RootFolderView }> {
    const org = caller.organization;
    const [folders, usage, rootUsage] = await Promise.all([
      this.deps.folders.list(org.id),
      this.deps.media.folderUsage(org.id),
      this.deps.media.folderUsage(org.id, [null]),
    ]);
    const inRoot = rootUsage.get(null);
    return {
      folders: folders.map((f) => view(f, usage.get(f.id))),
      root: { id: org.rootFolderId, files: inRoot?.files ?? 0, bytes: inRoot?.bytes ?? 0 },
    };
  }

  async get(caller: Pick<Caller, 'organization'>, input: { id: number }): Promise<FolderView> {
    const { organization: org } = caller;
    if (input.id === org.rootFolderId) throw Errors.rootFolder(input.id, 'read as a folder');
    const folder = await this.require(org, input.id);
    const usage = await this.deps.media.folderUsage(org.id, [input.id]);
    return view(folder, usage.get(input.id));
  }

  async create(caller: Pick<Caller, 'organization'>, input: { name: string }): Promise<FolderView> {
    const { name } = input;
    const folder = await this.deps.folders.create(caller.organization.id, checkName(name));
    if (!folder) throw Errors.conflict(`A folder named "${name.trim()}" exists already`);
    return view(folder, undefined);
  }

  async rename(
    caller: Pick<Caller, 'organization'>,
    input: { id: number; name: string },
  ): Promise<FolderView> {
    const org = caller.organization;
    const { id, name } = input;
    if (id === org.rootFolderId) throw Errors.rootFolder(id, 'renamed');
    const renamed = await this.deps.folders.rename(org.id, id, checkName(name));
    if (renamed === null) throw Errors.folderNotFound(id);
    if (renamed === 'taken')
      throw Errors.conflict(`A folder named "${name.trim()}" exists already`);
    const usage = await this.deps.media.folderUsage(org.id, [id]);
    return view(renamed, usage.get(id));
  }

  /**
   * Deletes an empty folder (answering it), or refuses with 409 when it holds
   * files, unless `recursive`: then a job deletes its files and the folder,
   * and the answer is the job's, at once (202 with its status URL: the job
   * may take long). The folder is held first, its files counted after: a
   * refusal, or a job that could not be queued, lets it go again.
   */
  async delete(
    caller: Pick<Caller, 'organization' | 'requestId'>,
    input: { id: number; recursive: boolean },
  ): Promise<{ deleted: FolderView } | { job: JobAnswer }> {
    const org = caller.organization;
    const { id } = input;
    if (id === org.rootFolderId) throw Errors.rootFolder(id, 'deleted');
    const folder = await this.deps.folders.holdForDelete(org.id, id);
    if (!folder) throw Errors.folderNotFound(id);
    // Whether the hold is done with (the folder removed) or handed over (to the job).
    let handedOver = false;
    try {
      const usage = (await this.deps.media.folderUsage(org.id, [id])).get(id);
      if (!usage?.files) {
        if (!(await this.deps.folders.removeHeld(org.id, id))) throw Errors.folderNotFound(id);
        handedOver = true;
        await this.deps.events?.promoteFolders({ ids: [id] }).catch(() => undefined);
        return { deleted: view(folder, usage) };
      }
      if (!input.recursive) throw Errors.folderNotEmpty(id, usage.files);
      if (!this.deps.jobs) throw new Error('FoldersService: no JobsService for a recursive delete');
      // The job holds the folder from here (it renews the mark) and removes it.
      const job = await this.deps.jobs.run(
        'media.delete-folder',
        { organizationId: org.id, requestId: caller.requestId, folderId: id },
        { async: true, onQueued: () => (handedOver = true), rootFolderId: org.rootFolderId },
      );
      return { job };
    } finally {
      // Should this fail too, the mark expires on its own.
      if (!handedOver) await this.deps.folders.release(org.id, id).catch(() => undefined);
    }
  }

  private async require(org: Organization, id: number): Promise<Folder> {
    const folder = await this.deps.folders.findById(org.id, id);
    if (!folder) throw Errors.folderNotFound(id);
    return folder;
  }

  /**
   * Moves files (by key, all of one organization) into a folder, or into no
   * folder with the root folder's id. All or nothing: an unknown folder or
   * key is refused before any record changes. Keys never change (as for a
   * folder rename): a key is where the bytes are, and clients keep keys.
   */
  async move(
    caller: Pick<Caller, 'organization'>,
    input: { mediaKeys: string[]; folderId: number },
  ): Promise<MediaRecord[]> {
    const org = caller.organization;
    let target: number | null = null;
    if (input.folderId !== org.rootFolderId) {
      const folder = await this.deps.folders.findById(org.id, input.folderId);
      if (!folder) throw Errors.folderNotFound(input.folderId);
      target = folder.id;
    }
    const keys = [...new Set(input.mediaKeys)];
    const found = await this.deps.media.findByKeys(org.id, keys);
    const missing = keys.find((k) => !found.has(k));
    if (missing !== undefined) throw Errors.mediaNotFound(missing);
    await this.deps.media.moveToFolder(
      org.id,
      [...found.values()].map((r) => r.id),
      target,
    );
    const moved = await this.deps.media.findByKeys(org.id, keys);
    return keys.flatMap((k) => moved.get(k) ?? []);
  }

  /**
   * Validates and resolves a folder spec: a name finds or creates, an id must
   * exist; both must agree. Null: no folder (neither given, or the root
   * folder's id alone).
   */
  async resolve(org: Organization, spec: FolderSpec): Promise<Folder | null> {
    const name = spec.folder?.trim();
    const rawId = spec.folderId?.trim();
    let byId: Folder | null = null;
    if (rawId !== undefined && rawId !== '') {
      if (!/^[1-9]\d{0,14}$/.test(rawId)) {
        throw Errors.validation([
          { field: 'folderId', message: 'folderId must be a positive integer' },
        ]);
      }
      if (Number(rawId) === org.rootFolderId) {
        // The root folder has no name: a name beside its id names another folder.
        if (name !== undefined && name !== '') throw Errors.folderMismatch(name, org.rootFolderId);
        return null;
      }
      byId = await this.deps.folders.findById(org.id, Number(rawId));
      if (!byId) throw Errors.folderNotFound(rawId);
    }
    if (name !== undefined && name !== '') {
      if (name.length > MAX_FOLDER_NAME) {
        throw Errors.validation([
          { field: 'folder', message: `folder must be at most ${MAX_FOLDER_NAME} characters` },
        ]);
      }
      if (byId) {
        if (byId.name !== name) throw Errors.folderMismatch(name, byId.id);
        return byId;
      }
      const found = await this.deps.folders.findOrCreate(org.id, name);
      if (found === 'deleting') {
        throw Errors.conflict(
          `The folder "${name}" is being deleted; it can be made again once it is gone`,
        );
      }
      return found;
    }
    return byId;
  }
}

function checkName(raw: string): string {
  const name = raw.trim();
  if (name === '' || name.length > MAX_FOLDER_NAME) {
    throw Errors.validation([
      { field: 'name', message: `name must be 1 to ${MAX_FOLDER_NAME} characters` },
    ]);
  }
  return name;
}

function view(folder: Folder, usage: { files: number; bytes: number } | undefined): FolderView {
  return {
    id: folder.id,
    name: folder.name,
    files: usage?.files ?? 0,
    bytes: usage?.bytes ?? 0,
    createdAt: folder.createdAt.toISOString(),
    updatedAt: folder.updatedAt.toISOString(),
  };
}
