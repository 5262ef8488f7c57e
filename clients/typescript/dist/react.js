// @unread/client/react: a React hook over watch(). Its own entry point, so that the main one needs no React.
import { useEffect, useState } from "react";
import { watch } from "./watch.js";
/**
 * A user's live counts in a React component: one watch per `userId`, opened by an effect and closed by its cleanup
 * (so React's strict mode, which runs effects twice, leaves one open). `options` are read when the user changes;
 * pass a stable `getToken`.
 */
export function useUnread(userId, options = {}) {
    const [snapshot, setSnapshot] = useState({ counts: null, status: "connecting" });
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
