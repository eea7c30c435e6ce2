//! Code generation: lock before the body, release after it on every exit.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ItemFn, ReturnType};

use crate::args::{Args, OnBusy};
use crate::template::Template;

/// Expands `#[redlock(attr)] item`.
pub(crate) fn redlock(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let function: ItemFn = syn::parse2(item)?;
    let args = Args::parse(attr).map_err(syn::Error::from)?;
    expand(&args, function)
}

fn expand(args: &Args, function: ItemFn) -> syn::Result<TokenStream> {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = function;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            "`#[redlock]` goes on an `async fn`: the lock is taken and released with `.await`",
        ));
    }
    let ret = match &sig.output {
        ReturnType::Type(_, ty) => ty.as_ref().clone(),
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                "a `#[redlock]` function must return `Result<_, E>` with `E: From<redlock_core::LockError>`, so that it can report a lock it could not take",
            ));
        }
    };
    // `resource = ".."`, or the templates of `resources = [..]` (`Args::parse` checked that
    // exactly one is given, and not an empty list).
    let literals: Vec<&syn::LitStr> = match (&args.resource, &args.resources) {
        (Some(resource), _) => vec![resource],
        (None, Some(resources)) => resources.iter().collect(),
        (None, None) => Vec::new(),
    };
    let templates = literals
        .iter()
        .map(|literal| Template::parse(literal, &sig))
        .collect::<syn::Result<Vec<_>>>()?;
    let (Some(template), Some(first)) = (templates.first(), literals.first()) else {
        return Err(syn::Error::new(
            sig.ident.span(),
            "`#[redlock]` needs `resource` or `resources`",
        ));
    };
    let krate = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::redlock_core));

    let rendered: Vec<TokenStream> = templates
        .iter()
        .zip(&literals)
        .map(|(template, literal)| {
            let format = &template.format;
            let format_args = &template.args;
            quote_spanned! {literal.span()=>
                ::std::format!(#format #(, #format_args)*)
            }
        })
        .collect();
    let many = args.resources.is_some();
    // One resource: its name. Several: every name, and, for messages, the names joined.
    let resource = if many {
        quote_spanned! {first.span()=> __redlock_resources.join(", ") }
    } else {
        rendered[0].clone()
    };
    let resources = many.then(|| {
        quote! {
            let __redlock_resources: ::std::vec::Vec<::std::string::String> =
                ::std::vec![#(#rendered),*];
        }
    });
    let lock_call = if many {
        quote! { __redlock_handle.lock_many_with(&__redlock_resources, &__redlock_options).await }
    } else if let Some(mode) = &args.mode {
        let variant = &mode.0;
        quote! {
            __redlock_handle
                .lock_mode_with(&__redlock_resource, #krate::Mode::#variant, &__redlock_options)
                .await
        }
    } else if let Some(permits) = args.permits {
        quote! {
            __redlock_handle
                .semaphore(::core::convert::AsRef::<str>::as_ref(&__redlock_resource), #permits)
                .acquire_with(&__redlock_options)
                .await
        }
    } else {
        quote! { __redlock_handle.lock_with(&__redlock_resource, &__redlock_options).await }
    };
    let lock_result = quote_spanned! {ret.span()=>
        <#ret as #krate::__private::LockResult>
    };
    // With `on_busy = "skip"`, a busy resource returns the skipped value, chosen by the type
    // system (`Skipped`: the success type's `Default`, `None` for an `Option`); a missing
    // `Default` is reported at the return type.
    let skip_busy = (args.on_busy == OnBusy::Skip).then(|| {
        quote_spanned! {ret.span()=>
            ::core::result::Result::Err(error) if error.is_busy() => {
                return <#ret as #krate::__private::SkipResult>::skipped(&__redlock_resource, &error);
            }
        }
    });
    let handle = match &args.redlock {
        Some(expr) => quote_spanned! {expr.span()=>
            let __redlock_handle: &#krate::Redlock = &(#expr);
        },
        None => {
            let pool = args
                .pool
                .as_ref()
                .map_or_else(|| "default".to_owned(), syn::LitStr::value);
            quote! {
                let __redlock_handle = match #krate::registry::get(#pool) {
                    ::core::result::Result::Ok(handle) => handle,
                    ::core::result::Result::Err(error) => return #lock_result::from_lock_error(error),
                };
                let __redlock_handle = &__redlock_handle;
            }
        }
    };
    let duration = |name: &str, millis: Option<u64>| {
        millis.map(|ms| {
            let setter = syn::Ident::new(name, proc_macro2::Span::call_site());
            quote! { .#setter(::core::time::Duration::from_millis(#ms)) }
        })
    };
    let setters = [
        duration("ttl", args.ttl.map(|m| m.ms)),
        duration("retry_delay", args.retry_delay.map(|m| m.ms)),
        duration("retry_jitter", args.retry_jitter.map(|m| m.ms)),
        duration("wait_timeout", args.wait_timeout.map(|m| m.ms)),
        duration("max_hold", args.max_hold.map(|m| m.ms)),
        duration("lock_at_least_for", args.lock_at_least_for.map(|m| m.ms)),
        Some({
            let class = &template.class;
            quote! { .resource_class(#class) }
        }),
        args.retry_count.map(|n| quote! { .retry_count(#n) }),
        args.drift_factor.map(|f| {
            let f = f.0;
            quote! { .drift_factor(#f) }
        }),
        args.auto_extend.then(|| quote! { .auto_extend(true) }),
        args.fencing.then(|| quote! { .fencing(true) }),
    ];
    // A permit, or a lock of several resources, is never re-entered (`Redlock::semaphore`,
    // `Redlock::lock_many`).
    let reentrant = args.reentrant.unwrap_or(args.permits.is_none() && !many);
    let bind_guard = args.guard.as_ref().map(|name| {
        quote! { let #name: #krate::LockInfo = __redlock_info; }
    });
    let info = args
        .guard
        .as_ref()
        .map(|_| quote! { let __redlock_info = __redlock_guard.info(); });
    let run_body = if args.auto_extend {
        quote! {
            match __redlock_guard.until_lost(__redlock_body).await {
                ::core::result::Result::Ok(output) => output,
                ::core::result::Result::Err(error) => {
                    ::core::mem::drop(__redlock_guard);
                    return #lock_result::from_lock_error(error);
                }
            }
        }
    } else {
        quote! { __redlock_body.await }
    };
    let stmts = &block.stmts;

    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #resources
            let __redlock_resource: ::std::string::String = #resource;
            let __redlock_guard = {
                #handle
                let __redlock_options = ::core::clone::Clone::clone(__redlock_handle.options())
                    .reentrant(#reentrant)
                    #(#setters)*;
                match #lock_call {
                    ::core::result::Result::Ok(guard) => guard,
                    #skip_busy
                    ::core::result::Result::Err(error) => return #lock_result::from_lock_error(error),
                }
            };
            #info
            // The body runs in its own async block so that `return` and `?` leave the block,
            // not the function, and the guard is released after it; inside the lock's scope,
            // so that annotated functions it awaits re-enter the lock (and siblings do not).
            let __redlock_body = __redlock_guard.scope(async move {
                #bind_guard
                #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::needless_return)]
                if false {
                    let __redlock_fake_return: #ret = loop {};
                    return __redlock_fake_return;
                }
                #(#stmts)*
            });
            let __redlock_output: #ret = #run_body;
            #krate::__private::released(&__redlock_resource, __redlock_guard.release().await);
            __redlock_output
        }
    })
}
