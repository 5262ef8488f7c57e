// @unread/client/react: a React hook over watch(). Its own entry point, so that the main one needs no React.
import { useEffect, useState } from "react";
import { watch, type WatchOptions, type WatchStatus } from "./watch.js";
import type { UnreadCounts } from "./types.js";

/** What {@link useUnread} returns: a new object whenever the counts or the status change. */
export interface UnreadSnapshot {
  /** The user's counts, `null` until the first message. */
  counts: UnreadCounts | null;
  /** The stream's status. */
  status: WatchStatus;
}

/**
 * A user's live counts in a React component: one watch per `userId`, opened by an effect and closed by its cleanup
 * (so React's strict mode, which runs effects twice, leaves one open). `options` are read when the user changes;
 * pass a stable `getToken`.
 */
export function useUnread(userId: string, options: WatchOptions = {}): UnreadSnapshot {
  const [snapshot, setSnapshot] = useState<UnreadSnapshot>({ counts: null, status: "connecting" });
  useEffect(() => {
    const w = watch(userId, options);
    const update = () => setSnapshot({ counts: w.counts && { ...w.counts }, status: w.status });
    const offs = [w.on("counts", update), w.on("status", update)];
    return () => {
      offs.forEach((off) => off());
      w.close();
    };
  }, [userId]); // eslint-disable-line react-hooks/exhaustive-deps -- one watch per user
  return snapshot;
}
