//! Lists in pages: at 1,000 nodes one list of every pod is tens of megabytes, and the loops
//! that read them only need a little of each object.

use std::future::Future;

use kube::api::{ListParams, ObjectList};

/// Fetch `params` page by page (`limit` objects each) with `fetch`, handing each page's
/// items to `take` before the next page is asked for.
pub async fn each_page<T, Fut>(
    params: ListParams,
    limit: u32,
    mut fetch: impl FnMut(ListParams) -> Fut,
    mut take: impl FnMut(Vec<T>),
) -> Result<(), kube::Error>
where
    T: Clone,
    Fut: Future<Output = Result<ObjectList<T>, kube::Error>>,
{
    let mut params = params.limit(limit);
    loop {
        let page = fetch(params.clone()).await?;
        take(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
    use kube::core::TypeMeta;

    /// A server of 0..n in pages: the continue token is the next offset.
    fn serve(n: u32, p: &ListParams) -> ObjectList<u32> {
        let from: u32 = p
            .continue_token
            .as_deref()
            .map_or(0, |t| t.parse().unwrap());
        let to = (from + p.limit.unwrap()).min(n);
        ObjectList {
            types: TypeMeta::default(),
            metadata: ListMeta {
                continue_: (to < n).then(|| to.to_string()),
                ..Default::default()
            },
            items: (from..to).collect(),
        }
    }

    #[tokio::test]
    async fn every_item_once_in_order_a_page_at_a_time() {
        for n in [0, 1, 249, 250, 251, 1000] {
            let (mut got, mut pages) = (Vec::new(), Vec::new());
            let fetch = |p: ListParams| std::future::ready(Ok(serve(n, &p)));
            each_page(ListParams::default(), 250, fetch, |items: Vec<u32>| {
                pages.push(items.len());
                got.extend(items);
            })
            .await
            .unwrap();
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "n = {n}");
            assert!(pages.iter().all(|&l| l <= 250), "{pages:?}");
            assert_eq!(pages.len(), (n as usize).div_ceil(250).max(1), "n = {n}");
        }
    }

    #[tokio::test]
    async fn an_error_mid_way_is_returned() {
        let mut calls = 0;
        let fetch = |p: ListParams| {
            calls += 1;
            std::future::ready(if calls == 2 {
                Err(kube::Error::LinesCodecMaxLineLengthExceeded)
            } else {
                Ok(serve(1000, &p))
            })
        };
        let r = each_page(ListParams::default(), 100, fetch, |_: Vec<u32>| {}).await;
        assert!(r.is_err());
    }
}
