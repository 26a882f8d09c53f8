/** The formats an image can be converted to: the one list the API, the job payloads and the worker share. */
export const CONVERT_FORMATS = ['jpeg', 'png', 'webp', 'avif', 'tiff', 'gif'] as const;

export type ConvertFormat = (typeof CONVERT_FORMATS)[number];
