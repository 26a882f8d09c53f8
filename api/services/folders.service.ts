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
 */
import { Errors } from '@shared/errors';
import type { EventOutbox } from '@shared/events/outbox';
import type { Folder, FoldersRepository } from '@shared/repositories/folders.repository';
import type { MediaRepository } from '@shared/repositories/media.repository';
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

  async list(caller: Pick<Caller, 'organization'>): Promise<FolderView[]> {
    const org = caller.organization;
    const [folders, usage] = await Promise.all([
      this.deps.folders.list(org.id),
      this.deps.media.folderUsage(org.id),
    ]);
    return folders.map((f) => view(f, usage.get(f.id)));
  }

  async get(caller: Pick<Caller, 'organization'>, input: { id: number }): Promise<FolderView> {
    const { organization: org } = caller;
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
        { async: true, onQueued: () => (handedOver = true) },
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

  /** Validates and resolves a folder spec: a name finds or creates, an id must exist; both must agree. */
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
