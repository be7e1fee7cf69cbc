//! [`resource_of!`]: `kube::Resource` for a type that stands for objects of another kind (a
//! wrapper such as [`crate::lenient::Lenient`], a partial read, a write's unread answer): the
//! API path comes from that kind, the metadata from the type itself.

/// Implements `kube::Resource` for `$ty`, served as kind `$of`: kind, group, version and
/// plural are `$of`'s; `meta`/`meta_mut` evaluate `$meta`/`$meta_mut` with `$this` bound to
/// `self`. Generic parameters and bounds go in the brackets.
///
/// ```ignore
/// gantry_api::resource_of!([K: kube::Resource<DynamicType = ()>] Written<K> => K, |w| &w.meta, &mut w.meta);
/// ```
#[macro_export]
macro_rules! resource_of {
    ([$($g:tt)*] $ty:ty => $of:ty, |$this:ident| $meta:expr, $meta_mut:expr) => {
        impl<$($g)*> ::kube::Resource for $ty {
            type DynamicType = ();
            type Scope = <$of as ::kube::Resource>::Scope;

            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::version(dt)
            }
            fn api_version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$of as ::kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                let $this = self;
                $meta
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                let $this = self;
                $meta_mut
            }
        }
    };
}
