//! The division of one tier's slots between the batches that claim them: priority classes
//! first, a minimum share for every lower class, max-min fairness inside a class, token quotas
//! as caps. Pure: the same claims always give the same division.

use cowork_schema::share::Priority;

/// The share of a tier's slots every lower class with work keeps beside higher classes, in
/// percent (at least one slot), so that it never starves.
pub const MIN_CLASS_SHARE_PERCENT: u64 = 10;

/// The slots of `slots` each lower class with work keeps beside higher classes.
pub fn class_floor_of(slots: u64) -> u64 {
    (slots * MIN_CLASS_SHARE_PERCENT / 100).max(1)
}

/// One batch's claim on a tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub priority: Priority,
    /// Jobs of the batch outstanding on the tier (queued or running).
    pub holding: u64,
    /// `true` when the batch has a job ready for the tier that only its share holds back:
    /// it would take every slot it is given. `false`: it wants what it holds, no more.
    pub wanting: bool,
    /// The most its token's quota leaves it (`None`: no quota).
    pub cap: Option<u64>,
}

impl Claim {
    /// What the batch would have outstanding if nothing held it back.
    fn demand(&self) -> u64 {
        let demand = if self.wanting { u64::MAX } else { self.holding };
        self.cap
            .map_or(demand, |cap| demand.min(cap.max(self.holding)))
    }
}

/// The number of jobs each claim may have outstanding on a tier of `slots` slots, in the
/// claims' order. A claim may hold more than it is allowed (nothing started is preempted):
/// it then admits nothing until its jobs finish below the allowance.
pub fn allocate(slots: u64, claims: &[Claim]) -> Vec<u64> {
    let mut allowed = vec![0; claims.len()];
    let present: Vec<Priority> = Priority::ALL
        .into_iter()
        .filter(|class| claims.iter().any(|claim| claim.priority == *class))
        .collect();
    let floor = class_floor_of(slots);
    let class_floor = |class: Priority| -> u64 {
        let demand = claims
            .iter()
            .filter(|claim| claim.priority == class)
            .fold(0_u64, |sum, claim| sum.saturating_add(claim.demand()));
        demand.min(floor)
    };
    let mut left = slots;
    for (rank, class) in present.iter().enumerate() {
        let reserved: u64 = present[rank + 1..].iter().map(|c| class_floor(*c)).sum();
        let own_floor = if rank == 0 { 0 } else { class_floor(*class) };
        let budget = left.saturating_sub(reserved).max(own_floor.min(left));
        let members: Vec<usize> = (0..claims.len())
            .filter(|&index| claims[index].priority == *class)
            .collect();
        let demands: Vec<u64> = members.iter().map(|&i| claims[i].demand()).collect();
        let holdings: Vec<u64> = members.iter().map(|&i| claims[i].holding).collect();
        let given = max_min(budget, &demands, &holdings);
        for (&index, give) in members.iter().zip(given) {
            allowed[index] = give;
            left = left.saturating_sub(give);
        }
    }
    allowed
}

/// Max-min fair division of `budget` between `demands`: every demand below the equal share is
/// met, the rest split equally; a slot that does not divide goes to the claim holding least
/// (then the earliest), so a newcomer gets its first job out first.
fn max_min(budget: u64, demands: &[u64], holdings: &[u64]) -> Vec<u64> {
    let mut given = vec![0_u64; demands.len()];
    let mut open: Vec<usize> = (0..demands.len()).collect();
    let mut left = budget;
    while !open.is_empty() && left > 0 {
        let share = left / open.len() as u64;
        let (met, unmet): (Vec<usize>, Vec<usize>) = open
            .iter()
            .partition(|&&index| demands[index] - given[index] <= share);
        if met.is_empty() {
            for &index in &unmet {
                given[index] += share;
            }
            left -= share * unmet.len() as u64;
            let mut by_holding = unmet.clone();
            by_holding.sort_by_key(|&index| (holdings[index], index));
            for &index in by_holding.iter().take(left as usize) {
                given[index] += 1;
            }
            break;
        }
        for &index in &met {
            left -= demands[index] - given[index];
            given[index] = demands[index];
        }
        open = unmet;
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanting(priority: Priority, holding: u64) -> Claim {
        Claim {
            priority,
            holding,
            wanting: true,
            cap: None,
        }
    }

    fn content(priority: Priority, holding: u64) -> Claim {
        Claim {
            wanting: false,
            ..wanting(priority, holding)
        }
    }

    #[test]
    fn one_batch_takes_every_slot() {
        assert_eq!(allocate(8, &[wanting(Priority::Normal, 0)]), vec![8]);
    }

    #[test]
    fn a_newcomer_gets_half_beside_a_sweep_holding_everything() {
        let claims = [wanting(Priority::Normal, 8), wanting(Priority::Normal, 0)];
        assert_eq!(allocate(8, &claims), vec![4, 4]);
    }

    #[test]
    fn an_odd_slot_goes_to_the_batch_holding_least() {
        let claims = [wanting(Priority::Normal, 8), wanting(Priority::Normal, 0)];
        assert_eq!(allocate(9, &claims), vec![4, 5]);
    }

    #[test]
    fn a_batch_content_with_what_it_holds_leaves_the_rest_to_others() {
        let claims = [content(Priority::Normal, 2), wanting(Priority::Normal, 6)];
        assert_eq!(allocate(8, &claims), vec![2, 6]);
    }

    #[test]
    fn urgent_goes_first_and_a_lower_class_keeps_its_floor() {
        let claims = [
            wanting(Priority::Batch, 4),
            wanting(Priority::Batch, 4),
            wanting(Priority::Urgent, 0),
        ];
        // 10% of 8 slots rounds to the one-slot floor for the batch class.
        assert_eq!(allocate(8, &claims), vec![1, 0, 7]);
        let with_normal = [
            wanting(Priority::Batch, 0),
            wanting(Priority::Normal, 0),
            wanting(Priority::Urgent, 0),
        ];
        assert_eq!(allocate(40, &with_normal), vec![4, 4, 32]);
    }

    #[test]
    fn an_urgent_batch_with_few_jobs_leaves_the_rest_to_lower_classes() {
        let claims = [wanting(Priority::Batch, 8), content(Priority::Urgent, 3)];
        assert_eq!(allocate(8, &claims), vec![5, 3]);
    }

    #[test]
    fn a_quota_caps_a_batch_and_the_rest_goes_to_others() {
        let capped = Claim {
            cap: Some(2),
            ..wanting(Priority::Normal, 0)
        };
        assert_eq!(
            allocate(8, &[capped, wanting(Priority::Normal, 0)]),
            vec![2, 6]
        );
    }

    #[test]
    fn no_slots_allow_nothing_and_the_division_never_exceeds_the_slots() {
        assert_eq!(allocate(0, &[wanting(Priority::Normal, 0)]), vec![0]);
        for slots in 0..20 {
            let claims = [
                wanting(Priority::Batch, 3),
                wanting(Priority::Normal, 1),
                content(Priority::Normal, 2),
                wanting(Priority::Urgent, 0),
            ];
            let total: u64 = allocate(slots, &claims).iter().sum();
            assert!(total <= slots, "{slots}: {total}");
        }
    }
}
