//! Where a producer puts a keyed record: the key partitioners of the Kafka clients ([`Partitioner`]), and one
//! input topic's placement of keys ([`Placement`]). The process's setting is [`Partitioner::configured`]
//! (`crate::kafka`).

/// The key partitioner the producers of the input topics use (`--partitioner`, `UNREAD_PARTITIONER`): where a
/// record of a given key lands. The service folds a user's events and the deltas for that user in one task only when
/// both land on the same partition, so the fan-out sends deltas where this partitioner puts their user, unread's own
/// producers (`unread produce`, the write gateway, `dead-letter replay`) use it, and every input record is checked
/// against it: one on another partition is dead-lettered (`misrouted`), never folded (docs/producers.md).
///
/// Each is librdkafka's own function (from the `rdkafka-sys` that rdkafka links), not a copy: the consumers' idea
/// of where a key lives is the producers' by construction. The tests below pin them to the Java client, librdkafka
/// and Sarama.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Partitioner {
    /// Kafka's default: the Java client, franz-go, KafkaJS's `DefaultPartitioner`, librdkafka's `murmur2_random`,
    /// kafka-go's `Murmur2Balancer{}`: `(murmur2(key) & 0x7fffffff) % partitions`.
    #[default]
    Murmur2,
    /// CRC32 of the key, librdkafka's default (`consistent_random`): confluent-kafka for Python, Go and .NET,
    /// node-rdkafka, rdkafka for Rust; kafka-go's `CRC32Balancer{}`: `crc32(key) % partitions`.
    Crc32,
    /// FNV-1a of the key, Sarama's default (`NewHashPartitioner`), librdkafka's `fnv1a_random`, kafka-go's `Hash{}`:
    /// `abs(int32(fnv1a(key))) % partitions`.
    Fnv1a,
}

impl Partitioner {
    /// Every partitioner unread knows, to name the one a misrouted record fits.
    pub const ALL: [Partitioner; 3] = [Partitioner::Murmur2, Partitioner::Crc32, Partitioner::Fnv1a];

    /// The partition (0..`partitions`) this partitioner picks for `key`.
    ///
    /// Panics when `partitions` is not positive.
    pub fn partition(self, key: &[u8], partitions: i32) -> i32 {
        assert!(partitions > 0, "a topic has at least one partition");
        let f = match self {
            Self::Murmur2 => rdkafka_sys::bindings::rd_kafka_msg_partitioner_murmur2,
            Self::Crc32 => rdkafka_sys::bindings::rd_kafka_msg_partitioner_consistent,
            Self::Fnv1a => rdkafka_sys::bindings::rd_kafka_msg_partitioner_fnv1a,
        };
        // SAFETY: each function reads `keylen` bytes at `key` (a live slice) and nothing else: it ignores the topic
        // handle and both opaques (librdkafka src/rdkafka_msg.c), so null pointers are fine there.
        unsafe {
            f(std::ptr::null(), key.as_ptr().cast(), key.len(), partitions, std::ptr::null_mut(), std::ptr::null_mut())
        }
    }

    /// Its name in librdkafka's `partitioner` property, for unread's own producers: the variant that partitions
    /// keyed records by the hash (keyless ones, which unread never sends, at random).
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            Self::Murmur2 => "murmur2_random",
            Self::Crc32 => "consistent_random",
            Self::Fnv1a => "fnv1a_random",
        }
    }
}

/// Its name as `--partitioner` takes it (clap's, from the variant).
impl std::fmt::Display for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum;
        f.write_str(self.to_possible_value().expect("no variant is skipped").get_name())
    }
}

/// Where the producers of one input topic put a key: their partitioner over the topic's partition count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The producers' partitioner.
    pub partitioner: Partitioner,
    /// The topic's partition count (positive).
    pub partitions: i32,
}

impl Placement {
    /// The partition of `key`.
    pub fn of(&self, key: &[u8]) -> i32 {
        self.partitioner.partition(key, self.partitions)
    }

    /// The partitioners, of those unread knows, that put `key` in `partition`: what a misrouted record's producer
    /// may be using (none: it does not partition by key at all, e.g. round-robin).
    pub fn fitting(&self, key: &[u8], partition: i32) -> Vec<Partitioner> {
        Partitioner::ALL.into_iter().filter(|p| p.partition(key, self.partitions) == partition).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partitioner_matches_the_java_client() {
        // murmur2 values from Kafka's own UtilsTest.testMurmur2 (signed ints in Java), one per tail length; the
        // Java partitioner takes `(h & 0x7fffffff) % n`.
        let cases: [(&[u8], i32); 5] = [
            (b"abc", 479470107),
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
        ];
        for (key, java) in cases {
            for n in [1, 7, 8, 1000, i32::MAX] {
                let want = ((java & 0x7fff_ffff) as u32 % n as u32) as i32;
                assert_eq!(Partitioner::Murmur2.partition(key, n), want, "{:?} over {n}", std::str::from_utf8(key));
            }
        }
    }

    #[test]
    fn crc32_matches_librdkafka_and_fnv1a_matches_sarama() {
        // (key, zlib's crc32, FNV-1a 32 as Go's hash/fnv gives it, read as int32 as Sarama does).
        let cases: [(&[u8], u32, i32); 4] = [
            (b"abc", 891568578, 440920331),
            (b"kafka", 1539077399, 221496545),
            (b"alice", 663665735, -2027809817),
            (b"\xff\xfe user", 1305791350, 1102868403),
        ];
        for (key, crc, fnv) in cases {
            for n in [1, 3, 8, 1000, i32::MAX] {
                assert_eq!(Partitioner::Crc32.partition(key, n), (crc % n as u32) as i32, "crc32 of {key:?} over {n}");
                // Sarama's hashPartitioner: `int32(h) % n`, negated when negative (Go's `%` keeps the sign).
                let sarama = (fnv % n).abs();
                assert_eq!(Partitioner::Fnv1a.partition(key, n), sarama, "fnv1a of {key:?} over {n}");
            }
        }
    }

    #[test]
    fn a_placement_names_the_partitioners_a_record_fits() {
        let placement = Placement { partitioner: Partitioner::Murmur2, partitions: 8 };
        let key = b"alice";
        let crc = Partitioner::Crc32.partition(key, 8);
        assert!(placement.fitting(key, crc).contains(&Partitioner::Crc32));
        let nowhere = (0..8).find(|p| Partitioner::ALL.iter().all(|x| x.partition(key, 8) != *p)).unwrap();
        assert!(placement.fitting(key, nowhere).is_empty());
        assert_eq!(placement.of(key), Partitioner::Murmur2.partition(key, 8));
    }
}
