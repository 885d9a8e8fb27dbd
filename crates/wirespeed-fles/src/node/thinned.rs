//! A record of a long run kept to a bounded size: every value while there is room, then every
//! second, every fourth, ... evenly over the whole run.

#[derive(Debug, Clone)]
pub struct Thinned<T> {
    kept: Vec<T>,
    cap: usize,
    /// Keep one value in `stride`.
    stride: u64,
    seen: u64,
}

impl<T> Thinned<T> {
    pub fn new(cap: usize) -> Self {
        Thinned { kept: Vec::new(), cap: cap.max(2), stride: 1, seen: 0 }
    }

    pub fn push(&mut self, v: T) {
        if self.seen.is_multiple_of(self.stride) {
            self.kept.push(v);
            if self.kept.len() >= self.cap {
                let mut i = 0;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride *= 2;
            }
        }
        self.seen += 1;
    }

    /// The values kept, in the order they came.
    pub fn kept(&self) -> &[T] {
        &self.kept
    }

    /// How many values came.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_an_even_sample_within_the_cap() {
        let mut t = Thinned::new(8);
        (0..5).for_each(|v| t.push(v));
        assert_eq!(t.kept(), [0, 1, 2, 3, 4]);
        (5..100).for_each(|v| t.push(v));
        assert!(t.kept().len() < 8);
        assert_eq!(t.seen(), 100);
        let gaps: Vec<u64> = t.kept().windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == gaps[0]), "{:?}", t.kept());
    }
}
