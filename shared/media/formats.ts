/**
 * The image formats a conversion can produce: the one list the API validates
 * against, the job payload is typed from, and the worker's encoders cover.
 * Clients may write `jpg` for `jpeg`.
 */

/** The conversion targets, by the name the job payload carries. */
export const CONVERT_FORMATS = ['jpeg', 'png', 'webp', 'avif', 'tiff', 'gif'] as const;

export type ConvertFormat = (typeof CONVERT_FORMATS)[number];

const [JPEG, ...OTHER_FORMATS] = CONVERT_FORMATS;

/** Every name a client may give (lower case), `jpg` beside `jpeg`, in the order messages list them. */
export const CONVERT_FORMAT_NAMES = [JPEG, 'jpg', ...OTHER_FORMATS] as const;
