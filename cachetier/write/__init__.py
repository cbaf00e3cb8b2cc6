"""Writes (D3N write-through and write-back, Pfimbi replication): the home of the write-back
journal, its flushing to the lake and its replication to peer journals (the write-back issue).
Empty until then: write-through coherence lives in ``cachetier.cachedlake`` today."""
